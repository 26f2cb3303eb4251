#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "qvl/error.h"
#include "qvl/io/safetensors.h"
#include "qvl/io/safetensors_writer.h"
#include "qvl/model/checkpoint_layout.h"
#include "qvl/model/config.h"
#include "qvl/model/synth.h"
#include "test_support.h"

using namespace qvl;

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir = "/tmp/qvl_test_" + std::to_string(::getpid()) + "_synth_" + name;
  std::system(("rm -rf '" + dir + "'").c_str());
  return dir;
}
void remove_dir(const std::string& dir) { std::system(("rm -rf '" + dir + "'").c_str()); }
bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

SynthOptions tiny_options(const std::string& out) {
  SynthOptions o;
  o.config_path = test::tiny_model_dir() + "/config.json";
  o.out_dir = out;
  o.seed = 1;
  o.shard_size = 4000000;  // the 9.7 MB embedding alone, the other 1.9 MB in a second shard
  return o;
}

float bf16_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::vector<float> values_of(const TensorView& t) {
  std::vector<float> out(size_t(t.numel()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = t.dtype == DType::BF16 ? bf16_to_float(t.as<uint16_t>()[i]) : t.as<float>()[i];
  return out;
}
struct Stats {
  double mean = 0, std = 0;
};
Stats stats_of(const std::vector<float>& v) {
  Stats s;
  for (float x : v) s.mean += x;
  s.mean /= double(v.size());
  for (float x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(s.std / double(v.size()));
  return s;
}

std::string synth_error(const SynthOptions& o) {
  try {
    synthesize_checkpoint(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("synth: the tiny config gives a sharded checkpoint that validates against its config") {
  const std::string out = fresh_dir("tiny");
  std::vector<std::string> reported;
  const SynthResult r = synthesize_checkpoint(tiny_options(out), [&](const std::string& f, uint64_t) {
    reported.push_back(f);
  });
  const auto reference_index =
      nlohmann::json::parse(read_text_file(test::tiny_model_dir() + "/model.safetensors.index.json"));
  CHECK(r.tensors == int64_t(test::goldens()["tiny_checkpoint_tensors"].size()));
  CHECK(r.parameters == reference_index["metadata"]["total_parameters"].get<int64_t>());
  CHECK(r.shards == std::vector<std::string>{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"});
  CHECK(reported == r.shards);

  Checkpoint ck(out);
  CHECK(ck.files().size() == 2);
  CHECK_NOTHROW(validate_checkpoint(ck, load_model_config(out)));
  uint64_t file_bytes = 0;
  for (const auto& f : ck.files()) {
    file_bytes += f->mapping().size();
    CHECK(f->metadata().at("format") == "pt");
    for (const auto& [name, t] : f->tensors()) CHECK(t.dtype == DType::BF16);
  }
  CHECK(r.bytes == file_bytes);

  const auto index = nlohmann::json::parse(read_text_file(out + "/model.safetensors.index.json"));
  CHECK(index["metadata"]["total_size"] == reference_index["metadata"]["total_size"]);
  CHECK(index["weight_map"].size() == ck.names().size());
  for (const auto& name : ck.names())
    CHECK(ck.get(name).file == out + "/" + index["weight_map"][name].get<std::string>());
  // Packed like the reference's own tiny checkpoint: the embedding alone in the first shard.
  CHECK(index["weight_map"] == reference_index["weight_map"]);

  // The config's folder has every support file: they are copied byte for byte.
  for (const char* name : {"config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                           "preprocessor_config.json", "generation_config.json"})
    CHECK_MESSAGE(read_text_file(out + "/" + name) == read_text_file(test::tiny_model_dir() + "/" + name), name);
  CHECK(r.missing_files.empty());
  for (const auto& f : {"model-00001-of-00002.safetensors.tmp", "model.safetensors.index.json.tmp"})
    CHECK(!exists(out + "/" + f));
  remove_dir(out);
}

TEST_CASE("synth: weights follow the seed only, not shard size or dtype") {
  const std::string a = fresh_dir("seed_a"), b = fresh_dir("seed_b"), c = fresh_dir("seed_c"), d = fresh_dir("f32");
  SynthOptions oa = tiny_options(a);
  SynthOptions ob = tiny_options(b);
  ob.shard_size = 1u << 30;  // one shard
  SynthOptions oc = tiny_options(c);
  oc.seed = 2;
  SynthOptions od = tiny_options(d);
  od.dtype = DType::F32;
  synthesize_checkpoint(oa);
  CHECK(synthesize_checkpoint(ob).shards.size() == 1);
  synthesize_checkpoint(oc);
  synthesize_checkpoint(od);
  Checkpoint ca(a), cb(b), cc(c), cd(d);
  int same_as_other_seed = 0;
  for (const auto& name : ca.names()) {
    const TensorView &ta = ca.get(name), &tb = cb.get(name), &tc = cc.get(name), &td = cd.get(name);
    CHECK_MESSAGE(std::memcmp(ta.data, tb.data, ta.nbytes) == 0, name);
    same_as_other_seed += std::memcmp(ta.data, tc.data, ta.nbytes) == 0;
    REQUIRE(td.dtype == DType::F32);
    CHECK_MESSAGE(values_of(ta) == values_of(td), name);  // f32 holds the same bf16-exact values
  }
  CHECK(same_as_other_seed == 0);
  for (const auto& dir : {a, b, c, d}) remove_dir(dir);
}

TEST_CASE("synth: values are scaled for a sane forward pass") {
  const std::string out = fresh_dir("stats");
  synthesize_checkpoint(tiny_options(out));
  Checkpoint ck(out);
  auto check_stats = [&](const std::string& name, double mean, double std) {
    const Stats s = stats_of(values_of(ck.get(name)));
    CHECK_MESSAGE(std::abs(s.mean - mean) < 0.1 * std + 0.01 * std::abs(mean), name << " mean " << s.mean);
    CHECK_MESSAGE(std::abs(s.std - std) < 0.1 * std, name << " std " << s.std);
  };
  check_stats("model.language_model.embed_tokens.weight", 0.0, 0.08);
  check_stats("model.language_model.layers.0.self_attn.q_proj.weight", 0.0, 1.0 / std::sqrt(32.0));
  check_stats("model.language_model.layers.2.mlp.down_proj.weight", 0.0, 1.0 / std::sqrt(96.0));
  check_stats("model.visual.patch_embed.proj.weight", 0.0, 1.0 / std::sqrt(3.0 * 2 * 16 * 16));
  check_stats("model.visual.blocks.1.attn.qkv.bias", 0.0, 0.1);
  check_stats("model.language_model.layers.1.self_attn.q_norm.weight", 1.0, 0.2);
  check_stats("model.visual.deepstack_merger_list.0.norm.weight", 1.0, 0.2);
  check_stats("model.visual.merger.linear_fc1.weight", 0.0, 1.0 / std::sqrt(256.0));
  remove_dir(out);
}

TEST_CASE("synth: refuses a non-empty folder unless forced, then replaces the old checkpoint") {
  const std::string out = fresh_dir("force");
  ::mkdir(out.c_str(), 0755);
  std::ofstream(out + "/notes.txt") << "keep me";
  std::ofstream(out + "/model-00009-of-00009.safetensors") << "stale";
  SynthOptions o = tiny_options(out);
  CHECK(synth_error(o) == "output folder '" + out + "' is not empty (pass --force to overwrite its checkpoint)");
  CHECK(!exists(out + "/model.safetensors.index.json"));
  o.force = true;
  synthesize_checkpoint(o);
  CHECK(!exists(out + "/model-00009-of-00009.safetensors"));
  CHECK(exists(out + "/notes.txt"));
  CHECK_NOTHROW(validate_checkpoint(Checkpoint(out), load_model_config(out)));
  remove_dir(out);
}

TEST_CASE("synth: one-line errors for an unusable output or input") {
  const std::string base = fresh_dir("errors");
  ::mkdir(base.c_str(), 0755);
  std::ofstream(base + "/a_file") << "x";
  SynthOptions o = tiny_options(base + "/a_file/out");
  CHECK(synth_error(o) == "cannot create output folder '" + base + "/a_file/out': Not a directory");
  o = tiny_options(base + "/a_file");
  CHECK(synth_error(o) == "output '" + base + "/a_file' exists and is not a folder");
  o = tiny_options(base + "/out");
  o.config_path = base + "/missing.json";
  CHECK(synth_error(o).find(base + "/missing.json") != std::string::npos);
  o = tiny_options(base + "/out");
  o.tokenizer_from = base + "/nowhere";
  CHECK(synth_error(o) == "tokenizer folder '" + base + "/nowhere' not found");
  CHECK(!exists(base + "/out"));
  remove_dir(base);
}

TEST_CASE("synth: processor and generation files come from the config's folder, the rest from --tokenizer-from") {
  const std::string base = fresh_dir("support");
  const std::string cfg_dir = base + "/cfg";
  ::mkdir(base.c_str(), 0755);
  ::mkdir(cfg_dir.c_str(), 0755);
  std::ofstream(cfg_dir + "/config.json") << read_text_file(test::tiny_model_dir() + "/config.json");
  const std::string own_generation = read_text_file(test::data_path("qwen3-vl-2b/generation_config.json"));
  std::ofstream(cfg_dir + "/generation_config.json") << own_generation;
  SynthOptions o = tiny_options(base + "/out");
  o.config_path = cfg_dir + "/config.json";

  SUBCASE("with --tokenizer-from") {
    o.tokenizer_from = test::tiny_model_dir();
    const SynthResult r = synthesize_checkpoint(o);
    CHECK(read_text_file(o.out_dir + "/generation_config.json") == own_generation);
    CHECK(read_text_file(o.out_dir + "/tokenizer.json") == read_text_file(test::tiny_model_dir() + "/tokenizer.json"));
    CHECK(r.missing_files.empty());
  }
  SUBCASE("without: the missing files are reported") {
    const SynthResult r = synthesize_checkpoint(o);
    CHECK(r.missing_files == std::vector<std::string>{"tokenizer.json", "tokenizer_config.json",
                                                      "chat_template.jinja", "preprocessor_config.json"});
  }
  remove_dir(base);
}

TEST_CASE("SafetensorsWriter: streamed pieces read back; short data leaves no file") {
  const std::string dir = fresh_dir("writer");
  ::mkdir(dir.c_str(), 0755);
  const std::vector<TensorEntry> entries = {{"a", DType::F32, {2, 3}}, {"b", DType::I64, {2}}};
  {
    SafetensorsWriter w(dir + "/ok.safetensors", entries, {{"format", "pt"}});
    const float a[6] = {1, 2, 3, 4, 5, 6};
    const int64_t b[2] = {-7, 9};
    w.append(a, 8);  // pieces need not follow tensor boundaries
    w.append(reinterpret_cast<const char*>(a) + 8, 16);
    w.append(b, 16);
    CHECK(!exists(dir + "/ok.safetensors"));
    w.finish();
  }
  SafetensorsFile f(dir + "/ok.safetensors");
  CHECK(f.get("a").shape == std::vector<int64_t>{2, 3});
  CHECK(f.get("a").as<float>()[4] == 5.0f);
  CHECK(f.get("b").as<int64_t>()[0] == -7);
  CHECK(reinterpret_cast<uintptr_t>(f.get("a").data) % 8 == 0);
  {
    SafetensorsWriter w(dir + "/short.safetensors", entries);
    w.append("abcd", 4);
    CHECK_THROWS_WITH(w.finish(), (dir + "/short.safetensors: only 4 of 40 data bytes were written").c_str());
  }
  {
    SafetensorsWriter w(dir + "/long.safetensors", entries);
    const std::vector<char> too_much(41);
    CHECK_THROWS_AS(w.append(too_much.data(), too_much.size()), Error);
  }
  {
    SafetensorsWriter abandoned(dir + "/abandoned.safetensors", entries);
  }
  for (const char* name : {"short.safetensors", "short.safetensors.tmp", "long.safetensors.tmp",
                           "abandoned.safetensors", "abandoned.safetensors.tmp"})
    CHECK_MESSAGE(!exists(dir + "/" + name), name);
  remove_dir(dir);
}
