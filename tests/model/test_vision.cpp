// The vision tower against the reference's recorded internals (FIXTURES.md):
// positions and rotary computed in C++, then the TorchScript module qvl builds
// from the tiny checkpoint (module_builder.h), in float32 and bfloat16.
#include <ATen/ATen.h>
#include <dirent.h>
#include <doctest/doctest.h>
#include <torch/script.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "qvl/decoder/torch_view.h"
#include "qvl/error.h"
#include "qvl/io/safetensors.h"
#include "qvl/model/config.h"
#include "qvl/tensor/huge_page_tensor.h"
#include "qvl/vision/module_builder.h"
#include "qvl/vision/module_cache.h"
#include "qvl/vision/positions.h"
#include "qvl/vision/vision_encoder.h"
#include "temp_dir.h"
#include "test_support.h"

namespace {

using qvl::ImageGrid;
using qvl_test::TempDir;


struct Fixtures {
  qvl::ModelConfig cfg = qvl::load_model_config(qvl::test::tiny_model_dir());
  qvl::Checkpoint ckpt{qvl::test::tiny_model_dir()};
  qvl::SafetensorsFile model_goldens{qvl::test::data_path("goldens_model.safetensors")};
  qvl::SafetensorsFile processor_goldens{qvl::test::data_path("goldens_processor.safetensors")};
  TempDir cache{"qvl-vision-test"};
  std::unique_ptr<qvl::VisionEncoder> f32, bf16, f32_script, bf16_script;

  // native: the blocks in C++ (the default); else the module's TorchScript forward.
  qvl::VisionEncoder& encoder(at::ScalarType dtype, bool native = true) {
    auto& slot = dtype == at::kFloat ? (native ? f32 : f32_script) : (native ? bf16 : bf16_script);
    if (!slot) {
      qvl::VisionOptions opts;
      opts.dtype = dtype;
      opts.cache_dir = cache.path;
      opts.native_blocks = native;
      slot = std::make_unique<qvl::VisionEncoder>(qvl::test::tiny_model_dir(), cfg, ckpt, opts);
    }
    return *slot;
  }
  at::Tensor golden(const std::string& name) const {
    return qvl::tensor_view(model_goldens.get(name)).to(at::kFloat);
  }
  ImageGrid grid(const std::string& model_case) const {
    at::Tensor g = qvl::tensor_view(model_goldens.get(model_case + ".image_grid_thw"));
    return {g[0][0].item<int64_t>(), g[0][1].item<int64_t>(), g[0][2].item<int64_t>()};
  }
  // What the processor hands the model: (u8/255 - 0.5)/0.5.
  at::Tensor pixels(const std::string& image) const {
    at::Tensor u8 = qvl::tensor_view(processor_goldens.get("default." + image + ".pixel_u8"));
    return (u8.to(at::kFloat) / 255.0 - 0.5) / 0.5;
  }
};

Fixtures& fixtures() {
  static Fixtures f;
  return f;
}

struct ModelCase {
  const char* name;
  const char* image;
};
const ModelCase kCases[] = {{"one_image", "small.png"}, {"system_image", "photo.jpg"}, {"multi_turn", "small.png"}};

// Largest difference relative to the largest reference value.
double relative_error(const at::Tensor& got, const at::Tensor& want) {
  REQUIRE((got.sizes() == want.sizes()));
  return ((got.to(at::kFloat) - want).abs().max() / want.abs().max()).item<double>();
}

const double kFloat32Tolerance = 1e-4;  // FIXTURES.md

}  // namespace

TEST_CASE("vision positions: rotary cos/sin match the reference") {
  auto& f = fixtures();
  for (const auto& c : kCases) {
    CAPTURE(c.name);
    qvl::VisionPositions pos = qvl::vision_positions(f.cfg.vision, {f.grid(c.name)});
    CHECK(relative_error(pos.rope_cos, f.golden(std::string(c.name) + ".vision.rope_cos")) <= kFloat32Tolerance);
    CHECK(relative_error(pos.rope_sin, f.golden(std::string(c.name) + ".vision.rope_sin")) <= kFloat32Tolerance);
    at::Tensor cu = f.golden(std::string(c.name) + ".vision.cu_seqlens");
    REQUIRE(pos.seq_lens.size() + 1 == static_cast<size_t>(cu.numel()));
    CHECK(pos.seq_lens[0] == static_cast<int64_t>(cu[1].item<float>() - cu[0].item<float>()));
  }
}

TEST_CASE("vision positions: a 48x48 grid lands exactly on the learned table") {
  // linspace(0, 47, 48) hits every table row, so each patch takes one row whole.
  auto& f = fixtures();
  qvl::VisionPositions pos = qvl::vision_positions(f.cfg.vision, {ImageGrid{1, 48, 48}});
  CHECK(at::allclose(pos.pos_weight[0], at::ones({48 * 48})));
  CHECK(pos.pos_weight.slice(0, 1).abs().max().item<float>() == 0.0f);
  // Merge-window order: the 3rd patch is row 1, column 0; the 5th is row 0, column 2.
  CHECK(pos.pos_index[0][2].item<int64_t>() == 48);
  CHECK(pos.pos_index[0][4].item<int64_t>() == 2);
}

TEST_CASE("vision positions: bad grids are refused") {
  auto& f = fixtures();
  CHECK_THROWS_AS(qvl::vision_positions(f.cfg.vision, {ImageGrid{1, 5, 4}}), qvl::Error);
  CHECK_THROWS_AS(qvl::vision_positions(f.cfg.vision, {}), qvl::Error);
}

TEST_CASE("vision encoder f32: block input, merger and deepstack outputs match the reference") {
  auto& f = fixtures();
  auto& enc = f.encoder(at::kFloat);
  for (const auto& c : kCases) {
    CAPTURE(c.name);
    const std::string key = std::string(c.name) + ".vision.";
    at::Tensor px = f.pixels(c.image);
    CHECK(relative_error(enc.block_input(px, {f.grid(c.name)}), f.golden(key + "block0_in")) <= kFloat32Tolerance);
    qvl::VisionFeatures out = enc.encode(px, {f.grid(c.name)});
    CHECK(c10::toString(out.embeds.scalar_type()) == std::string("Float"));
    CHECK(relative_error(out.embeds, f.golden(key + "merger_out")) <= kFloat32Tolerance);
    REQUIRE(out.deepstack.size() == 3);
    for (int i = 0; i < 3; ++i)
      CHECK(relative_error(out.deepstack[i], f.golden(key + "deepstack" + std::to_string(i) + "_out")) <=
            kFloat32Tolerance);
  }
}

TEST_CASE("vision encoder bf16: close to the float32 reference") {
  // bf16 keeps 8 significant bits (relative rounding 2^-9 ≈ 0.2%) on every
  // weight, the pixels and every activation; five blocks and a merger compound
  // that to about 1% of the largest output. 3% leaves headroom without letting
  // a wrong layer (errors of order 100%) through.
  const double kBFloat16Tolerance = 3e-2;
  auto& f = fixtures();
  auto& enc = f.encoder(at::kBFloat16);
  for (const auto& c : kCases) {
    CAPTURE(c.name);
    const std::string key = std::string(c.name) + ".vision.";
    qvl::VisionFeatures out = enc.encode(f.pixels(c.image), {f.grid(c.name)});
    CHECK(c10::toString(out.embeds.scalar_type()) == std::string("BFloat16"));
    CHECK(relative_error(out.embeds, f.golden(key + "merger_out")) <= kBFloat16Tolerance);
    for (int i = 0; i < 3; ++i)
      CHECK(relative_error(out.deepstack[i], f.golden(key + "deepstack" + std::to_string(i) + "_out")) <=
            kBFloat16Tolerance);
  }
}

TEST_CASE("vision encoder: the TorchScript forward matches the reference too, and the native blocks") {
  // The module's own forward stays the reference the native blocks are held to.
  auto& f = fixtures();
  for (const auto& c : kCases) {
    CAPTURE(c.name);
    const std::string key = std::string(c.name) + ".vision.";
    at::Tensor px = f.pixels(c.image);
    qvl::VisionFeatures script = f.encoder(at::kFloat, false).encode(px, {f.grid(c.name)});
    qvl::VisionFeatures native = f.encoder(at::kFloat).encode(px, {f.grid(c.name)});
    CHECK(relative_error(script.embeds, f.golden(key + "merger_out")) <= kFloat32Tolerance);
    CHECK(relative_error(native.embeds, script.embeds) <= 1e-5);
    for (int i = 0; i < 3; ++i) CHECK(relative_error(native.deepstack[i], script.deepstack[i]) <= 1e-5);
    // bf16: both as close to the float32 reference as bf16 allows. They
    // differ by where roundings fall, and by whose kernels run the module's
    // bf16 ops (oneDNN on x86, ATen's own on aarch64).
    qvl::VisionFeatures script16 = f.encoder(at::kBFloat16, false).encode(px, {f.grid(c.name)});
    qvl::VisionFeatures native16 = f.encoder(at::kBFloat16).encode(px, {f.grid(c.name)});
    const at::Tensor reference = f.golden(key + "merger_out");
    CHECK(relative_error(script16.embeds.to(at::kFloat), reference) <= 3e-2);
    CHECK(relative_error(native16.embeds.to(at::kFloat), reference) <= 3e-2);
  }
}

TEST_CASE("vision encoder: two images in one call give the same features as each alone") {
  auto& f = fixtures();
  auto& enc = f.encoder(at::kFloat);
  const ImageGrid a = f.grid("one_image"), b = f.grid("system_image");
  at::Tensor pa = f.pixels("small.png"), pb = f.pixels("photo.jpg");
  qvl::VisionFeatures both = enc.encode(at::cat({pa, pb}), {a, b});
  qvl::VisionFeatures alone_a = enc.encode(pa, {a}), alone_b = enc.encode(pb, {b});
  const int64_t ta = a.tokens(2);
  REQUIRE(both.embeds.size(0) == ta + b.tokens(2));
  CHECK(relative_error(both.embeds.slice(0, 0, ta), alone_a.embeds) <= 1e-5);
  CHECK(relative_error(both.embeds.slice(0, ta), alone_b.embeds) <= 1e-5);
  for (int i = 0; i < 3; ++i) {
    CHECK(relative_error(both.deepstack[i].slice(0, 0, ta), alone_a.deepstack[i]) <= 1e-5);
    CHECK(relative_error(both.deepstack[i].slice(0, ta), alone_b.deepstack[i]) <= 1e-5);
  }
  // And the reference's own single-image outputs, for the second image's slice.
  CHECK(relative_error(both.embeds.slice(0, ta), f.golden("system_image.vision.merger_out")) <= kFloat32Tolerance);
}

TEST_CASE("vision encoder: sizes no golden has") {
  auto& f = fixtures();
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    auto& enc = f.encoder(dtype);
    for (ImageGrid g : {ImageGrid{1, 6, 10}, ImageGrid{1, 2, 2}, ImageGrid{1, 40, 8}}) {
      CAPTURE(g.h);
      at::Tensor px = at::rand({g.patches(), 1536}) * 2 - 1;
      qvl::VisionFeatures out = enc.encode(px, {g});
      CHECK(out.embeds.size(0) == g.tokens(2));
      CHECK(out.embeds.size(1) == 32);
      CHECK(out.embeds.isfinite().all().item<bool>());
      REQUIRE(out.deepstack.size() == 3);
      CHECK((out.deepstack[2].sizes() == out.embeds.sizes()));
    }
  }
  // The golden image still comes out right after the new shapes went through.
  qvl::VisionFeatures again = f.encoder(at::kFloat).encode(f.pixels("small.png"), {f.grid("one_image")});
  CHECK(relative_error(again.embeds, f.golden("one_image.vision.merger_out")) <= kFloat32Tolerance);
}

TEST_CASE("vision encoder: wrong pixel shapes are refused") {
  auto& f = fixtures();
  auto& enc = f.encoder(at::kFloat);
  const ImageGrid g = f.grid("one_image");
  CHECK_THROWS_AS(enc.encode(at::zeros({g.patches() - 4, 1536}), {g}), qvl::Error);
  CHECK_THROWS_AS(enc.encode(at::zeros({g.patches(), 1535}), {g}), qvl::Error);
  CHECK_THROWS_AS(enc.encode(at::zeros({g.patches(), 1536}, at::kDouble), {g}), qvl::Error);
}

TEST_CASE("vision module file (qvl export): named by weights, builder version and dtype; built with no Python") {
  auto& f = fixtures();
  const std::string fp = f.ckpt.fingerprint();
  CHECK(qvl::vision_module_path("/c", fp, at::kFloat) != qvl::vision_module_path("/c", fp, at::kBFloat16));
  CHECK(qvl::vision_module_path("/c", fp, at::kFloat).find(fp) != std::string::npos);
  CHECK(qvl::vision_module_path("/c", fp, at::kFloat).find(qvl::vision_module_version()) != std::string::npos);

  // No Python anywhere (the variable qvl once read, and no PATH): the module is still made.
  TempDir empty("qvl-vision-test");
  qvl::VisionOptions opts;
  opts.cache_dir = empty.path;
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("QVL_PYTHON", "/nonexistent/python3", 1);
  ::setenv("PATH", "/nonexistent", 1);
  qvl::VisionModuleFile file = qvl::ensure_vision_module(qvl::test::tiny_model_dir(), f.ckpt, opts);
  ::setenv("PATH", path.c_str(), 1);
  ::unsetenv("QVL_PYTHON");
  CHECK(file.built);
  CHECK(file.path == qvl::vision_module_path(empty.path, qvl::vision_module_key(qvl::test::tiny_model_dir(), f.ckpt),
                                             at::kBFloat16));
  CHECK_FALSE(qvl::ensure_vision_module(qvl::test::tiny_model_dir(), f.ckpt, opts).built);  // found, not rebuilt
}

TEST_CASE("vision encoder: makes its module in memory, and no file is read or written") {
  // The encoders of every dtype and quantization leave their cache folder as
  // they found it: the module is never saved, nor looked for (vision_encoder.cpp).
  auto& f = fixtures();
  TempDir dir("qvl-vision-test");
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (bool native : {true, false}) {
      qvl::VisionOptions opts;
      opts.dtype = dtype;
      opts.cache_dir = dir.path;
      opts.native_blocks = native;
      qvl::VisionEncoder encoder(qvl::test::tiny_model_dir(), f.cfg, f.ckpt, opts);
      const qvl::VisionFeatures got = encoder.encode(f.pixels("small.png"), {f.grid("one_image")});
      CHECK(got.embeds.size(0) > 0);
    }
  }
  CHECK(dir.files().empty());
  // A module file that cannot be read changes nothing either.
  qvl::VisionOptions opts;
  opts.dtype = at::kFloat;
  opts.cache_dir = dir.path;
  {
    std::FILE* out = std::fopen(qvl::vision_module_path(dir.path, qvl::vision_module_key(qvl::test::tiny_model_dir(), f.ckpt),
                                                       at::kFloat).c_str(), "w");
    REQUIRE(out);
    std::fputs("not a TorchScript archive", out);
    std::fclose(out);
  }
  qvl::VisionEncoder encoder(qvl::test::tiny_model_dir(), f.cfg, f.ckpt, opts);
  const at::Tensor px = f.pixels("photo.jpg");
  CHECK(relative_error(encoder.encode(px, {f.grid("system_image")}).embeds, f.golden("system_image.vision.merger_out")) <=
        kFloat32Tolerance);
}

TEST_CASE("vision module builder: the parameters are the checkpoint's vision tensors") {
  // Independent of the builder: every model.visual.* tensor of the tiny
  // checkpoint must be a parameter of the same name without the prefix, with
  // the same values in float32 (the patch embedding's Conv3d kernel flattened).
  auto& f = fixtures();
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    CAPTURE(c10::toString(dtype));
    torch::jit::Module m = qvl::build_vision_module(f.cfg, f.ckpt, dtype);
    std::map<std::string, at::Tensor> params;
    for (const auto& p : m.named_parameters()) params[p.name] = p.value;
    size_t vision_tensors = 0;
    for (const std::string& name : f.ckpt.names()) {
      if (name.rfind("model.visual.", 0) != 0) continue;
      ++vision_tensors;
      CAPTURE(name);
      auto it = params.find(name.substr(13));
      REQUIRE(it != params.end());
      CHECK((it->second.scalar_type() == dtype));
      at::Tensor want = qvl::tensor_view(f.ckpt.get(name)).to(dtype);
      CHECK(it->second.numel() == want.numel());
      CHECK(at::equal(it->second.reshape(-1), want.reshape(-1)));
    }
    CHECK(vision_tensors > 0);
    CHECK(params.size() == vision_tensors);
    CHECK(params.at("patch_embed.proj.weight").dim() == 2);
  }
}

TEST_CASE("vision module file: what qvl export writes runs exactly as the module qvl makes in memory") {
  // Python's torch.jit.load reads the same archive; here libtorch reads it.
  auto& f = fixtures();
  TempDir dir("qvl-vision-test");
  qvl::VisionOptions opts;
  opts.dtype = at::kFloat;
  opts.cache_dir = dir.path;
  const qvl::VisionModuleFile file = qvl::ensure_vision_module(qvl::test::tiny_model_dir(), f.ckpt, opts);
  REQUIRE(file.built);
  torch::jit::Module loaded = torch::jit::load(file.path);
  loaded.eval();
  const at::Tensor px = f.pixels("photo.jpg");
  const ImageGrid grid = f.grid("system_image");
  const qvl::VisionPositions pos = qvl::vision_positions(f.cfg.vision, {grid});
  at::NoGradGuard no_autograd;
  const auto out = loaded.forward({px, pos.pos_index, pos.pos_weight, pos.rope_cos, pos.rope_sin,
                                   c10::List<int64_t>(pos.seq_lens)})
                       .toTuple()
                       ->elements();
  const qvl::VisionFeatures made = f.encoder(at::kFloat, /*native=*/false).encode(px, {grid});
  const at::Tensor file_embeds = out.at(0).toTensor();
  CHECK(at::equal(made.embeds, file_embeds));
  const std::vector<at::Tensor> file_deepstack = out.at(1).toTensorVector();
  REQUIRE(made.deepstack.size() == file_deepstack.size());
  for (size_t i = 0; i < made.deepstack.size(); ++i) CHECK(at::equal(made.deepstack[i], file_deepstack[i]));
  CHECK(relative_error(file_embeds, f.golden("system_image.vision.merger_out")) <= kFloat32Tolerance);
}

TEST_CASE("vision module builder: a checkpoint that does not match config.json is refused, naming the tensor") {
  auto& f = fixtures();
  qvl::ModelConfig wider = f.cfg;
  wider.vision.intermediate_size += 8;
  CHECK_THROWS_WITH_AS(qvl::build_vision_module(wider, f.ckpt, at::kFloat),
                       doctest::Contains("model.visual.blocks.0.mlp.linear_fc1.weight"), qvl::Error);
  qvl::ModelConfig deeper = f.cfg;
  deeper.vision.depth += 1;
  CHECK_THROWS_AS(qvl::build_vision_module(deeper, f.ckpt, at::kFloat), qvl::Error);
}

TEST_CASE("huge-paged activation tensors are ordinary dense tensors, and large ones start on a 2 MB boundary") {
  for (const auto& [sizes, dtype] : std::vector<std::pair<std::vector<int64_t>, at::ScalarType>>{
           {{1200, 1024}, at::kBFloat16}, {{1200, 4096}, at::kFloat}, {{3, 5}, at::kFloat}, {{0, 7}, at::kBFloat16}}) {
    CAPTURE(sizes.at(0));
    at::Tensor t = qvl::tensor::empty_huge_paged(sizes, at::TensorOptions().dtype(dtype));
    CHECK(t.sizes().vec() == sizes);
    CHECK((t.scalar_type() == dtype));
    CHECK(t.is_contiguous());
    const int64_t bytes = t.numel() * int64_t(t.element_size());
    if (bytes >= (int64_t(2) << 20)) CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % (uintptr_t(2) << 20) == 0);
    // Every byte is writable, and what is written reads back.
    at::Tensor values = at::arange(t.numel(), at::kFloat).reshape(sizes).to(dtype);
    t.copy_(values);
    CHECK(at::equal(t, values));
  }
}
