// qvl: ask questions about images with Qwen3-VL on a CPU.
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli_docs.h"
#include "commands.h"
#include "qvl/error.h"
#include "qvl/kernels/cpu.h"

// libgomp's wait policy (spin briefly, then sleep; float32 runs sleep at
// once) is chosen before main: see openmp_wait_policy.cpp.

int main(int argc, char** argv) {
  using namespace qvl::app;
  CLI::App app{"qvl - ask Qwen3-VL about images, on a CPU"};
  app.require_subcommand(1);
  // The CPU tier is chosen once, here, so a bad QVL_ISA is reported before any work.
  std::string tier;
  try {
    tier = qvl::kernels::isa_description();
  } catch (const qvl::Error& e) {
    fmt::print(stderr, "qvl: error: {}\n", e.what());
    return kError;
  }
  app.set_version_flag("--version", fmt::format("qvl {}\nkernels: {}", QVL_VERSION, tier));
  int exit_code = kOk;
  register_tokenize(app, exit_code);
  register_preprocess(app, exit_code);
  register_ask(app, exit_code);
  register_synth(app, exit_code);
  register_export(app, exit_code);
  register_ocr(app, exit_code);
  register_chat(app, exit_code);
  register_bench(app, exit_code);
  register_serve(app, exit_code);
  register_docs(app);  // hidden: --print-man, --completion SHELL (after every command exists)
  // `qvl help [COMMAND]` and `qvl version` are what people type: the flags they mean.
  std::vector<std::string> args(argv, argv + argc);
  if (args.size() >= 2 && args[1] == "help") {
    args.erase(args.begin() + 1);
    args.push_back("--help");
  } else if (args.size() == 2 && args[1] == "version") {
    args[1] = "--version";
  }
  std::vector<char*> arg_pointers;
  for (std::string& a : args) arg_pointers.push_back(a.data());
  try {
    app.parse(int(arg_pointers.size()), arg_pointers.data());
  } catch (const CLI::ParseError& e) {
    // --help/--version exit 0; every usage mistake exits kUsage, as documented.
    if (e.get_exit_code() != 0 && app.get_subcommands().empty()) {
      // No command chosen ("qvl --bogus", "qvl"): say which there are.
      std::vector<std::string> names;
      for (const CLI::App* sub : app.get_subcommands({}))
        if (!sub->get_group().empty()) names.push_back(sub->get_name());
      std::string what = e.what();
      if (args.size() >= 2 && !args[1].empty())
        what = args[1][0] == '-' ? fmt::format("unknown option '{}' (a command comes first)", args[1])
                                 : fmt::format("'{}' is not a qvl command", args[1]);
      fmt::print(stderr, "qvl: {}\nqvl: the commands are {}; `qvl COMMAND --help` describes one, `qvl --help` all\n",
                 what, fmt::join(names, ", "));
      return kUsage;
    }
    const int code = app.exit(e);
    return code == 0 ? kOk : kUsage;
  } catch (const qvl::Error& e) {
    fmt::print(stderr, "qvl: error: {}\n", e.what());
    return kError;
  } catch (const std::exception& e) {
    fmt::print(stderr, "qvl: error: {}\n", e.what());
    return kError;
  }
  // Results go to stdout: losing them (a full disk, a closed pipe) is an error,
  // whatever the command, not a success.
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    const int e = errno;
    fmt::print(stderr, "qvl: error: cannot write the results to stdout{}{}\n", e ? ": " : "", e ? std::strerror(e) : "");
    return kError;
  }
  return exit_code;
}
