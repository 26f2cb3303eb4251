// How long libgomp's idle threads spin before they sleep, chosen before
// libgomp starts.
//
// Between parallel regions libgomp's threads spin-wait, by default for 300000
// rounds of `pause` (GOMP_SPINCOUNT; ~10-15 ms on Zen 4/5) before they sleep
// on a futex. Alone on the cores that helps a little (a decode step opens
// hundreds of short regions); beside any other busy process it is a
// disaster: a spinning thread holds a core the descheduled one needs, and
// bf16 decode fell to 0.3-0.8 tok/s. Never spinning (OMP_WAIT_POLICY=PASSIVE)
// costs ~25 % of decode speed alone. A bounded spin, long enough to bridge the
// gap between a decode step's regions and far shorter than a scheduler time
// slice, keeps both: see docs/PERFORMANCE.md, "Fair on a shared machine".
// Float32 runs wait passively (OpenBLAS's own threads need the cores:
// prefill 7.7 tok/s spinning vs 14-18 passive).
//
// libgomp reads its settings in its constructor, which runs before main()
// and before anything qvl's own code could setenv() (glibc resets environ
// after the executable's .preinit_array runs). So qvl defines getenv()
// itself: the dynamic linker binds libgomp's calls (and every other
// library's) to the executable's definition. It is glibc's getenv - a scan of
// environ - except that, when the user has set neither OMP_WAIT_POLICY nor
// GOMP_SPINCOUNT, it answers GOMP_SPINCOUNT with qvl's choice (0, passive, for
// float32). Only GOMP_SPINCOUNT: libgomp from GCC 13 on reads the OMP_*
// variables by walking environ, not through getenv, but still asks getenv for
// its GOMP_* ones. Unlike re-executing
// the program with the variables set, this costs nothing at start-up (loading
// libtorch twice costs ~0.5 s of CPU). The choice is made from argv in
// .preinit_array, which the loader runs before any library's constructor.
// Child processes (bench's runs) make the same choice from their own argv.
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace {

// Rounds of libgomp's spin loop (one `pause` each) before a waiting thread sleeps.
constexpr const char* kSpinCount = "10000";
constexpr const char* kPassiveSpinCount = "0";

const char* g_spin_count = nullptr;  // qvl's answer for GOMP_SPINCOUNT, or null when the user chose

const char* find_in(char** env, const char* name) {
  const size_t length = std::strlen(name);
  for (char** entry = env; entry && *entry; ++entry)
    if (std::strncmp(*entry, name, length) == 0 && (*entry)[length] == '=') return *entry + length + 1;
  return nullptr;
}

bool is_f32_run(int argc, char** argv) {
  for (int i = 1; i < argc && argv && argv[i]; ++i) {
    if (std::strcmp(argv[i], "--dtype=f32") == 0) return true;
    if (std::strcmp(argv[i], "--dtype") == 0 && i + 1 < argc && argv[i + 1] && std::strcmp(argv[i + 1], "f32") == 0)
      return true;
  }
  return false;
}

// Runs before every shared library's constructor (ELF DT_PREINIT_ARRAY), with
// the process's own argument and environment vectors.
void choose_wait_policy(int argc, char** argv, char** envp) {
  if (find_in(envp, "OMP_WAIT_POLICY") || find_in(envp, "GOMP_SPINCOUNT")) return;  // the user chose
  g_spin_count = is_f32_run(argc, argv) ? kPassiveSpinCount : kSpinCount;
}

__attribute__((section(".preinit_array"), used)) void (*const g_choose_wait_policy)(int, char**, char**) =
    &choose_wait_policy;

}  // namespace

extern "C" char* getenv(const char* name) noexcept {
  if (name == nullptr) return nullptr;
  if (const char* value = find_in(environ, name)) return const_cast<char*>(value);
  if (g_spin_count && std::strcmp(name, "GOMP_SPINCOUNT") == 0) return const_cast<char*>(g_spin_count);
  return nullptr;
}
