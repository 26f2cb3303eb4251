#include "qvl/vision/module_builder.h"

#include <fmt/core.h>
#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <unistd.h>

#include "qvl/decoder/torch_view.h"
#include "qvl/error.h"
#include "qvl/io/safetensors.h"
#include "qvl/model/checkpoint_layout.h"
#include "qvl/model/config.h"

namespace qvl {
namespace {

// Each kind of layer is one TorchScript class whose methods are compiled once
// and shared by all its instances (the 24 blocks are one class). The methods
// compute exactly what scripts/export_torchscript.py's nn.Modules compute,
// op for op, so both ways of making the module give the same numbers.

const char* kLinearSource = R"(
def forward(self, x: Tensor) -> Tensor:
    return torch.linear(x, self.weight, self.bias)
)";

const char* kLayerNormSource = R"(
def forward(self, x: Tensor) -> Tensor:
    return torch.layer_norm(x, [self.weight.size(0)], self.weight, self.bias, self.eps)
)";

const char* kPatchEmbedSource = R"(
def forward(self, pixel_values: Tensor) -> Tensor:
    return self.proj.forward(pixel_values.to(self.proj.weight.dtype))
)";

// 2-D rotary in float32 whatever the compute dtype. Queries per attention
// step are bounded (query_chunk) so the score matrix of a large image stays
// small. The softmax runs in float32: dtype 6 (TorchScript compiled from C++
// has no torch.float32; saved TorchScript spells dtypes as numbers too).
const char* kAttentionSource = R"(
def rotate_pairs(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    x32 = x.float()
    half = x32.shape[-1] // 2
    swapped = torch.cat((-x32[..., half:], x32[..., :half]), dim=-1)
    rotated = x32 * cos.unsqueeze(1) + swapped * sin.unsqueeze(1)
    return rotated.to(x.dtype)

def forward(self, x: Tensor, cos: Tensor, sin: Tensor, seq_lens: List[int]) -> Tensor:
    n = x.shape[0]
    q, k, v = self.qkv.forward(x).view(n, 3, self.heads, -1).unbind(1)
    q = self.rotate_pairs(q, cos, sin).transpose(0, 1)
    k = self.rotate_pairs(k, cos, sin).transpose(0, 1)
    v = v.transpose(0, 1)
    outputs: List[Tensor] = []
    start = 0
    for length in seq_lens:
        keys = k[:, start:start + length]
        values = v[:, start:start + length]
        for q_start in range(start, start + length, self.query_chunk):
            q_end = min(q_start + self.query_chunk, start + length)
            scores = torch.matmul(q[:, q_start:q_end], keys.transpose(1, 2)) * self.scale
            probs = torch.softmax(scores, dim=-1, dtype=6).to(values.dtype)
            outputs.append(torch.matmul(probs, values))
        start += length
    attended = torch.cat(outputs, dim=1).transpose(0, 1).reshape(n, -1)
    return self.proj.forward(attended)
)";

const char* kMlpSource = R"(
def forward(self, x: Tensor) -> Tensor:
    return self.linear_fc2.forward(torch.gelu(self.linear_fc1.forward(x), approximate="tanh"))
)";

const char* kBlockSource = R"(
def forward(self, x: Tensor, cos: Tensor, sin: Tensor, seq_lens: List[int]) -> Tensor:
    x = x + self.attn.forward(self.norm1.forward(x), cos, sin, seq_lens)
    return x + self.mlp.forward(self.norm2.forward(x))
)";

// The main merger normalizes each patch before joining a merge window; the
// deepstack mergers normalize the joined vector (norm_after_join).
const char* kMergerSource = R"(
def forward(self, x: Tensor) -> Tensor:
    if self.norm_after_join:
        x = self.norm.forward(x.reshape(-1, self.joined))
    else:
        x = self.norm.forward(x).reshape(-1, self.joined)
    return self.linear_fc2.forward(torch.gelu(self.linear_fc1.forward(x)))
)";

// Patch embedding plus the bilinearly blended position embedding (in float32).
const char* kBlockInputSource = R"(
def block_input(self, pixel_values: Tensor, pos_index: Tensor, pos_weight: Tensor) -> Tensor:
    patches = self.patch_embed.forward(pixel_values)
    corners = self.pos_embed.weight[pos_index].float() * pos_weight.unsqueeze(-1)
    positions = corners[0] + corners[1] + corners[2] + corners[3]
    return (patches.float() + positions).to(patches.dtype)
)";

// The tower's forward is written out block by block for the config at hand
// (TorchScript from C++ has no ModuleList to loop over; a scripted Python
// ModuleList loop is unrolled the same way).
const char* kForwardHead = R"(
def forward(self, pixel_values: Tensor, pos_index: Tensor, pos_weight: Tensor, rope_cos: Tensor, rope_sin: Tensor,
            seq_lens: List[int]) -> Tuple[Tensor, List[Tensor]]:
    x = self.block_input(pixel_values, pos_index, pos_weight)
    taps: List[Tensor] = []
)";
const char* kForwardBlock = "    x = getattr(self.blocks, \"{}\").forward(x, rope_cos, rope_sin, seq_lens)\n";
const char* kForwardTap = "    taps.append(x)\n";
const char* kForwardMergers = "    deepstack: List[Tensor] = []\n";
const char* kForwardMerger = "    deepstack.append(getattr(self.deepstack_merger_list, \"{}\").forward(taps[{}]))\n";
const char* kForwardTail = "    return self.merger.forward(x), deepstack\n";

// The reference's vision LayerNorms; the attention's query block.
constexpr double kLayerNormEps = 1e-6;
constexpr int64_t kQueryChunk = 1024;
// Bump when the parameters or attributes change without the sources changing.
constexpr const char* kLayoutVersion = "layout 1";

std::string tower_forward_source(const VisionConfig& v) {
  std::string s = kForwardHead;
  const auto& taps = v.deepstack_visual_indexes;
  for (int64_t i = 0; i < v.depth; ++i) {
    s += fmt::format(kForwardBlock, i);
    if (std::find(taps.begin(), taps.end(), i) != taps.end()) s += kForwardTap;
  }
  s += kForwardMergers;
  for (size_t k = 0; k < taps.size(); ++k) s += fmt::format(kForwardMerger, k, k);
  return s + kForwardTail;
}

// The checkpoint's vision tensors as parameters, checked against the layout
// config.json implies (model/checkpoint_layout.h).
class VisionTensors {
 public:
  VisionTensors(const ModelConfig& cfg, const Checkpoint& ckpt, at::ScalarType dtype) : ckpt_(ckpt), dtype_(dtype) {
    for (const ExpectedTensor& t : expected_tensors(cfg))
      if (t.name.rfind(kPrefix, 0) == 0) shapes_[t.name.substr(kPrefix.size())] = t.shape;
  }

  // The tensor model.visual.<name> in the module's dtype.
  at::Tensor get(const std::string& name) {
    const std::string full = kPrefix + name;
    auto expected = shapes_.find(name);
    if (expected == shapes_.end()) throw Error(fmt::format("vision module: {} is not in the checkpoint layout", full));
    const TensorView& view = ckpt_.get(full);
    if (view.shape != expected->second)
      throw Error(fmt::format("vision weights do not match config.json: {} is {}, expected {}", full,
                              shape_string(view.shape), shape_string(expected->second)));
    if (view.dtype != DType::BF16 && view.dtype != DType::F16 && view.dtype != DType::F32)
      throw Error(fmt::format("{} has dtype {}, expected BF16, F16 or F32", full, dtype_name(view.dtype)));
    used_.insert(name);
    at::Tensor t = tensor_view(view);
    return t.scalar_type() == dtype_ ? t : t.to(dtype_);
  }

  // The layout's vision tensors, without the model.visual. prefix.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, shape] : shapes_) out.push_back(name);
    return out;
  }

  // Every vision tensor of the layout became a parameter (builder and layout agree).
  void check_all_used() const {
    for (const auto& [name, shape] : shapes_)
      if (!used_.count(name)) throw Error(fmt::format("vision module: {}{} was left out", kPrefix, name));
  }

 private:
  inline static const std::string kPrefix = "model.visual.";
  const Checkpoint& ckpt_;
  at::ScalarType dtype_;
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::set<std::string> used_;
};

// Makes module instances of named TorchScript classes in one compilation unit.
class ModuleFactory {
 public:
  torch::jit::Module make(const std::string& kind) {
    c10::ClassTypePtr& type = types_[kind];
    if (!type) {
      type = c10::ClassType::create(c10::QualifiedName("__torch__.qvl.vision." + kind), cu_, /*is_module=*/true);
      cu_->register_type(type);
    }
    torch::jit::Module m(cu_, type);
    // Module::eval() and Python's loader expect every module to have it.
    m.register_attribute("training", c10::BoolType::get(), false);
    return m;
  }
  // Compiles a class's methods once, after its first instance has all its attributes.
  void define(torch::jit::Module& m, const std::string& source) {
    if (defined_.insert(m.type()->name()->qualifiedName()).second) m.define(source);
  }

 private:
  std::shared_ptr<torch::jit::CompilationUnit> cu_ = std::make_shared<torch::jit::CompilationUnit>();
  std::map<std::string, c10::ClassTypePtr> types_;
  std::set<std::string> defined_;
};

// The Conv3d's kernel equals its stride: a linear map per patch.
at::Tensor flat_patch_embedding(const VisionConfig& v, const at::Tensor& conv_weight) {
  return conv_weight.reshape({v.hidden_size, v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size});
}

class TowerBuilder {
 public:
  TowerBuilder(const ModelConfig& cfg, const Checkpoint& ckpt, at::ScalarType dtype)
      : v_(cfg.vision), tensors_(cfg, ckpt, dtype) {}

  torch::jit::Module build() {
    torch::jit::Module tower = factory_.make("VisionTower");
    torch::jit::Module patch_embed = factory_.make("PatchEmbed");
    torch::jit::Module proj = factory_.make("Linear");
    proj.register_parameter("weight", flat_patch_embedding(v_, tensors_.get("patch_embed.proj.weight")), false);
    proj.register_parameter("bias", tensors_.get("patch_embed.proj.bias"), false);
    factory_.define(proj, kLinearSource);
    patch_embed.register_module("proj", proj);
    factory_.define(patch_embed, kPatchEmbedSource);
    tower.register_module("patch_embed", patch_embed);

    torch::jit::Module pos_embed = factory_.make("Embedding");
    pos_embed.register_parameter("weight", tensors_.get("pos_embed.weight"), false);
    tower.register_module("pos_embed", pos_embed);

    torch::jit::Module blocks = factory_.make("BlockList");
    for (int64_t i = 0; i < v_.depth; ++i) blocks.register_module(std::to_string(i), block(fmt::format("blocks.{}.", i)));
    tower.register_module("blocks", blocks);

    tower.register_module("merger", merger("merger.", false));
    tower.register_attribute("deepstack_layers", c10::ListType::ofInts(),
                             c10::List<int64_t>(v_.deepstack_visual_indexes));
    torch::jit::Module mergers = factory_.make("MergerList");
    for (size_t k = 0; k < v_.deepstack_visual_indexes.size(); ++k)
      mergers.register_module(std::to_string(k), merger(fmt::format("deepstack_merger_list.{}.", k), true));
    tower.register_module("deepstack_merger_list", mergers);

    tensors_.check_all_used();
    factory_.define(tower, std::string(kBlockInputSource) + tower_forward_source(v_));
    tower.eval();
    return tower;
  }

 private:
  torch::jit::Module linear(const std::string& prefix) {
    torch::jit::Module m = factory_.make("Linear");
    m.register_parameter("weight", tensors_.get(prefix + "weight"), false);
    m.register_parameter("bias", tensors_.get(prefix + "bias"), false);
    factory_.define(m, kLinearSource);
    return m;
  }

  torch::jit::Module layer_norm(const std::string& prefix) {
    torch::jit::Module m = factory_.make("LayerNorm");
    m.register_parameter("weight", tensors_.get(prefix + "weight"), false);
    m.register_parameter("bias", tensors_.get(prefix + "bias"), false);
    m.register_attribute("eps", c10::FloatType::get(), kLayerNormEps);
    factory_.define(m, kLayerNormSource);
    return m;
  }

  torch::jit::Module block(const std::string& prefix) {
    torch::jit::Module attn = factory_.make("VisionAttention");
    attn.register_attribute("heads", c10::IntType::get(), v_.num_heads);
    attn.register_attribute("scale", c10::FloatType::get(), std::pow(double(v_.hidden_size / v_.num_heads), -0.5));
    attn.register_attribute("query_chunk", c10::IntType::get(), kQueryChunk);
    attn.register_module("qkv", linear(prefix + "attn.qkv."));
    attn.register_module("proj", linear(prefix + "attn.proj."));
    factory_.define(attn, kAttentionSource);

    torch::jit::Module mlp = factory_.make("VisionMLP");
    mlp.register_module("linear_fc1", linear(prefix + "mlp.linear_fc1."));
    mlp.register_module("linear_fc2", linear(prefix + "mlp.linear_fc2."));
    factory_.define(mlp, kMlpSource);

    torch::jit::Module b = factory_.make("VisionBlock");
    b.register_module("norm1", layer_norm(prefix + "norm1."));
    b.register_module("norm2", layer_norm(prefix + "norm2."));
    b.register_module("attn", attn);
    b.register_module("mlp", mlp);
    factory_.define(b, kBlockSource);
    return b;
  }

  torch::jit::Module merger(const std::string& prefix, bool norm_after_join) {
    torch::jit::Module m = factory_.make("PatchMerger");
    m.register_attribute("joined", c10::IntType::get(), v_.hidden_size * v_.spatial_merge_size * v_.spatial_merge_size);
    m.register_attribute("norm_after_join", c10::BoolType::get(), norm_after_join);
    m.register_module("norm", layer_norm(prefix + "norm."));
    m.register_module("linear_fc1", linear(prefix + "linear_fc1."));
    m.register_module("linear_fc2", linear(prefix + "linear_fc2."));
    factory_.define(m, kMergerSource);
    return m;
  }

  const VisionConfig& v_;
  VisionTensors tensors_;
  ModuleFactory factory_;
};

// TorchScript errors carry a multi-line traceback; qvl reports one line.
std::string first_line(const c10::Error& e) {
  std::string what = e.what_without_backtrace();
  return what.substr(0, what.find('\n'));
}

}  // namespace

torch::jit::Module build_vision_module(const ModelConfig& cfg, const Checkpoint& ckpt, at::ScalarType dtype) {
  if (dtype != at::kBFloat16 && dtype != at::kFloat)
    throw Error(fmt::format("vision module: dtype {} is not supported (bf16 or f32)", c10::toString(dtype)));
  try {
    at::NoGradGuard no_autograd;
    return TowerBuilder(cfg, ckpt, dtype).build();
  } catch (const c10::Error& e) {
    throw Error(fmt::format("cannot build the vision module: {}", first_line(e)));
  }
}

std::map<std::string, at::Tensor> vision_parameters(const ModelConfig& cfg, const Checkpoint& ckpt,
                                                    at::ScalarType dtype, const std::set<std::string>& leave_out) {
  if (dtype != at::kBFloat16 && dtype != at::kFloat)
    throw Error(fmt::format("vision weights: dtype {} is not supported (bf16 or f32)", c10::toString(dtype)));
  try {
    at::NoGradGuard no_autograd;
    VisionTensors tensors(cfg, ckpt, dtype);
    std::map<std::string, at::Tensor> params;
    for (const std::string& name : tensors.names()) {
      if (leave_out.count(name)) continue;
      at::Tensor t = tensors.get(name);
      params[name] = name == "patch_embed.proj.weight" ? flat_patch_embedding(cfg.vision, t) : t;
    }
    return params;
  } catch (const c10::Error& e) {
    throw Error(fmt::format("cannot read the vision weights: {}", first_line(e)));
  }
}

void save_vision_module(torch::jit::Module& module, const std::string& path) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  try {
    module.save(tmp);
  } catch (const c10::Error& e) {
    ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot write the vision module {}: {}", path, first_line(e)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot write the vision module {}", path));
  }
}

std::string vision_module_version() {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char* text : {kLinearSource, kLayerNormSource, kPatchEmbedSource, kAttentionSource, kMlpSource,
                           kBlockSource, kMergerSource, kBlockInputSource, kForwardHead, kForwardBlock, kForwardTap,
                           kForwardMergers, kForwardMerger, kForwardTail, kLayoutVersion})
    for (const char* c = text; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
  for (double number : {kLayerNormEps, double(kQueryChunk)})
    for (char c : fmt::format("{}", number)) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return fmt::format("{:016x}", h).substr(0, 10);
}

}  // namespace qvl
