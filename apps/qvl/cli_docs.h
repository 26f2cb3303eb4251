// The man page and shell completions, printed from the registered commands.
#pragma once
#include <CLI/CLI.hpp>

namespace qvl::app {

// Adds the hidden options `--print-man` and `--completion bash|zsh|fish` to
// qvl's top-level app; call it after every command is registered.
void register_docs(CLI::App& app);

}  // namespace qvl::app
