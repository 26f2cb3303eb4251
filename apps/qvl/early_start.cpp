// Starts opening the model's checkpoint, and mapping its text decoder's pages,
// before any library's constructor runs (model/early_checkpoint.h says why).
//
// The loader runs the executable's .preinit_array with the process's own
// argument and environment vectors, before libtorch's ~0.3 s of static
// registration on one core; the checkpoint is opened and populated on a thread
// meanwhile, on the idle one. Only the commands that load the model ask for it
// (ask, chat, ocr and bench's child runs), never for --help. The arguments are
// read here only to guess which folder and whether the decoder reads the
// checkpoint; CLI11 still parses them in main(), and the session checks that
// the folder it opens is the one opened here.
#include <sched.h>

#include <cstring>
#include <string>

#include "commands.h"
#include "qvl/model/early_checkpoint.h"

namespace {

const char* find_env(char** envp, const char* name) {
  const size_t length = std::strlen(name);
  for (char** entry = envp; entry && *entry; ++entry)
    if (std::strncmp(*entry, name, length) == 0 && (*entry)[length] == '=') return *entry + length + 1;
  return nullptr;
}

// The value of `--name VALUE` or `--name=VALUE` in argv[2..], or null.
const char* flag_value(int argc, char** argv, const char* name) {
  const size_t length = std::strlen(name);
  for (int i = 2; i < argc && argv[i]; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;
    if (std::strncmp(argv[i], name, length) != 0) continue;
    if (argv[i][length] == '=') return argv[i] + length + 1;
    if (argv[i][length] == '\0' && i + 1 < argc) return argv[i + 1];
  }
  return nullptr;
}

bool has_flag(int argc, char** argv, const char* flag) {
  for (int i = 2; i < argc && argv[i]; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;
    if (std::strcmp(argv[i], flag) == 0) return true;
  }
  return false;
}

bool loads_model(const char* command) {
  for (const char* c : {"ask", "chat", "ocr", "bench-run"})
    if (std::strcmp(command, c) == 0) return true;
  return false;
}

void start_early(int argc, char** argv, char** envp) {
  if (argc < 2 || !argv || !argv[1] || !loads_model(argv[1])) return;
  if (has_flag(argc, argv, "--help") || has_flag(argc, argv, "-h")) return;
  qvl::EarlyCheckpointRequest request;
  if (const char* dir = flag_value(argc, argv, "--model")) {
    request.model_dir = dir;
  } else {
    const char* env = find_env(envp, "QVL_MODEL");
    request.model_dir = env && *env ? env : qvl::app::kDefaultModelDir;
  }
  // Populate only when the decoder will read the checkpoint's weights (an
  // int8/int4 decoder reads its cache file) and a second core is there to do
  // it: `--threads 1` asks for one core (shards side by side), and on one
  // core the start-up itself would wait for it.
  const char* quant = flag_value(argc, argv, "--quant");
  const char* threads = flag_value(argc, argv, "--threads");
  cpu_set_t cpus;
  const bool one_core = sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) < 2;
  request.populate_text_weights =
      (!quant || std::strcmp(quant, "none") == 0) && !(threads && std::strcmp(threads, "1") == 0) && !one_core;
  qvl::open_checkpoint_early(request);
}

__attribute__((section(".preinit_array"), used)) void (*const g_start_early)(int, char**, char**) = &start_early;

}  // namespace
