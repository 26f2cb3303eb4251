#include "qvl/vision/module_cache.h"

#include <caffe2/serialize/inline_container.h>
#include <dirent.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <torch/script.h>
#include <unistd.h>

#include "qvl/error.h"
#include "qvl/io/cache_dir.h"
#include "qvl/io/mapped_file.h"
#include "qvl/io/safetensors.h"
#include "qvl/io/sha256.h"
#include "qvl/model/config.h"
#include "qvl/vision/module_builder.h"

namespace qvl {
namespace {

bool file_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A module is a zip archive whose directory sits at its end: a truncated or
// overwritten file fails to open here, cheaply, without reading the weights.
bool module_archive_is_whole(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  try {
    caffe2::serialize::PyTorchStreamReader archive(path);
    for (const std::string& record : archive.getAllRecords())
      if (archive.getRecordOffset(record) > size_t(st.st_size)) return false;
    return true;
  } catch (const c10::Error&) {
    return false;
  }
}

// Only modules of the same weights go: a shared cache folder may hold other models' modules.
void remove_stale_modules(const std::string& dir, const std::string& fingerprint, const std::string& keep,
                          at::ScalarType dtype) {
  const std::string prefix = "vision-" + fingerprint + "-";
  const std::string suffix = std::string("-") + vision_dtype_tag(dtype) + ".pt";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    bool ours = name.rfind(prefix, 0) == 0 && name.size() > prefix.size() + suffix.size() &&
                name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    if (ours && dir + "/" + name != keep) ::unlink((dir + "/" + name).c_str());
  }
  ::closedir(d);
}

}  // namespace

const char* vision_dtype_tag(at::ScalarType dtype) {
  if (dtype == at::kBFloat16) return "bf16";
  if (dtype == at::kFloat) return "f32";
  throw Error(fmt::format("vision encoder: dtype {} is not supported (bf16 or f32)", c10::toString(dtype)));
}

std::string vision_module_key(const std::string& model_dir, const Checkpoint& ckpt) {
  // config.json fixes what the weights' shapes do not: the number of heads,
  // which blocks feed the deepstack, the activation.
  const std::string config = sha256_hex(read_text_file(model_dir + "/config.json"));
  return ckpt.fingerprint() + "-" + config.substr(0, 8);
}

std::string vision_module_path(const std::string& cache_dir, const std::string& key, at::ScalarType dtype) {
  return fmt::format("{}/vision-{}-{}-{}.pt", cache_dir, key, vision_module_version(), vision_dtype_tag(dtype));
}

VisionModuleFile ensure_vision_module(const std::string& model_dir, const Checkpoint& ckpt, const VisionOptions& opts,
                                      bool force) {
  const std::string fingerprint = ckpt.fingerprint();
  const std::string dir = model_cache_dir(model_dir, fingerprint, opts.cache_dir);
  const std::string path = vision_module_path(dir, vision_module_key(model_dir, ckpt), opts.dtype);
  const bool present = file_exists(path);
  // A damaged module (a full disk, a killed copy) is rebuilt like a missing one.
  if (present && !force && module_archive_is_whole(path)) return {path, false};
  torch::jit::Module made = build_vision_module(load_model_config(model_dir), ckpt, opts.dtype);
  save_vision_module(made, path);
  remove_stale_modules(dir, fingerprint, path, opts.dtype);
  return {path, true};
}

}  // namespace qvl
