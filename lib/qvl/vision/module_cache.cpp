#include "qvl/vision/module_cache.h"

#include <caffe2/serialize/inline_container.h>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "qvl/error.h"
#include "qvl/io/mapped_file.h"
#include "qvl/io/safetensors.h"
#include "qvl/io/sha256.h"
#include "qvl/vision/export_script.h"

extern char** environ;

namespace qvl {
namespace {

const char* kDefaultPython = "/usr/bin/python3";
const int kExitNoTorch = 3;  // the script's own status for "import torch failed"

bool file_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// mkdir -p; false when the folder cannot be made or written.
bool make_writable_dir(const std::string& dir) {
  for (size_t slash = dir.find('/', 1); ; slash = dir.find('/', slash + 1)) {
    std::string part = dir.substr(0, slash);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
    if (slash == std::string::npos) break;
  }
  return ::access(dir.c_str(), W_OK) == 0;
}

std::string user_cache_root() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/qvl";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/qvl";
  return "";
}

std::string python_path() {
  const char* env = std::getenv("QVL_PYTHON");
  return env && *env ? env : kDefaultPython;
}

// Python's own errors end with the exception line; that is the one worth showing.
std::string last_line(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  return text.substr(text.rfind('\n') + 1);  // npos + 1 == 0: the whole text
}

std::string write_temp_script() {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string path = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/qvl-export-XXXXXX.py";
  int fd = ::mkstemps(path.data(), 3);
  if (fd < 0) throw Error(fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  std::string_view text = export_script_text();
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    throw Error(fmt::format("cannot write {}", path));
  }
  return path;
}

// Runs argv, returning its exit status and what it wrote to stdout/stderr.
int run_capturing_output(const std::vector<std::string>& argv, std::string* output) {
  int fds[2];
  if (::pipe(fds) != 0) throw Error(fmt::format("pipe: {}", std::strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int err = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (err != 0) {
    ::close(fds[0]);
    throw Error(fmt::format("cannot run {}: {}", argv[0], std::strerror(err)));
  }
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    output->append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
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

std::string vision_cache_dir(const std::string& model_dir, const std::string& fingerprint,
                             const VisionOptions& opts) {
  std::string chosen = opts.cache_dir;
  if (chosen.empty())
    if (const char* env = std::getenv("QVL_CACHE_DIR"); env && *env) chosen = env;
  if (!chosen.empty()) {
    if (!make_writable_dir(chosen)) throw Error(fmt::format("cache folder {} cannot be created or written", chosen));
    return chosen;
  }
  std::string beside_model = model_dir + "/.qvl-cache";
  if (make_writable_dir(beside_model)) return beside_model;
  std::string root = user_cache_root();
  std::string per_model = root + "/" + fingerprint;
  if (root.empty() || !make_writable_dir(per_model))
    throw Error(fmt::format("no writable cache folder: neither {} nor {} (set $HOME or pass a cache folder)",
                            beside_model, root.empty() ? "~/.cache/qvl" : per_model));
  return per_model;
}

std::string vision_module_key(const std::string& model_dir, const Checkpoint& ckpt) {
  // config.json fixes what the weights' shapes do not: the number of heads,
  // which blocks feed the deepstack, the activation.
  const std::string config = sha256_hex(read_text_file(model_dir + "/config.json"));
  return ckpt.fingerprint() + "-" + config.substr(0, 8);
}

std::string vision_module_path(const std::string& cache_dir, const std::string& key, at::ScalarType dtype) {
  return fmt::format("{}/vision-{}-{}-{}.pt", cache_dir, key, export_script_version(), vision_dtype_tag(dtype));
}

void build_vision_module(const std::string& model_dir, at::ScalarType dtype, const std::string& out_path) {
  const std::string python = python_path();
  if (::access(python.c_str(), X_OK) != 0)
    throw Error(fmt::format("cannot build the vision module: {} not found; install it with "
                            "`sudo apt-get install python3 python3-torch`",
                            python));
  const std::string script = write_temp_script();
  std::string output;
  int status = 0;
  try {
    // -I: ignore PYTHONPATH and user site-packages, whose torch would not match our libtorch.
    status = run_capturing_output(
        {python, "-I", script, "--model", model_dir, "--dtype", vision_dtype_tag(dtype), "--out", out_path},
        &output);
  } catch (...) {
    ::unlink(script.c_str());
    throw;
  }
  ::unlink(script.c_str());
  if (status == kExitNoTorch)
    throw Error(fmt::format("cannot build the vision module: {} has no torch; install it with "
                            "`sudo apt-get install python3-torch`",
                            python));
  if (status != 0)
    throw Error(fmt::format("building the vision module {} failed ({} exited with status {}): {}", out_path,
                            python, status, last_line(output)));
  if (!file_exists(out_path))
    throw Error(fmt::format("building the vision module: {} succeeded but wrote no {}", python, out_path));
}

std::string ensure_vision_module(const std::string& model_dir, const Checkpoint& ckpt, const VisionOptions& opts,
                                 bool force) {
  const std::string fingerprint = ckpt.fingerprint();
  const std::string dir = vision_cache_dir(model_dir, fingerprint, opts);
  const std::string path = vision_module_path(dir, vision_module_key(model_dir, ckpt), opts.dtype);
  const bool present = file_exists(path);
  // A damaged module (a full disk, a killed copy) is rebuilt like a missing one.
  if (present && !force && module_archive_is_whole(path)) return path;
  if (!opts.build_if_missing && !force)
    throw Error(fmt::format("vision module {} is {}; build it with `qvl export --model {} --dtype {}`", path,
                            present ? "damaged" : "missing", model_dir, vision_dtype_tag(opts.dtype)));
  build_vision_module(model_dir, opts.dtype, path);
  remove_stale_modules(dir, fingerprint, path, opts.dtype);
  return path;
}

}  // namespace qvl
