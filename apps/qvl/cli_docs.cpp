// qvl's man page and shell completions, written from the same CLI11 definitions
// that --help prints, so they cannot drift apart. Two hidden options print them
// (`qvl --print-man`, `qvl --completion bash|zsh|fish`); the build runs them
// after linking qvl (cmake/qvl_docs.cmake) and installs what they print.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "cli_docs.h"
#include "commands.h"
#include "qvl/error.h"

namespace qvl::app {
namespace {

// One flag or positional argument, as the docs show it.
struct Arg {
  std::vector<std::string> names;    // "-i", "--image"; a positional's one name
  std::string kind;                  // the value's kind ("TEXT", "INT"); empty for a flag
  std::vector<std::string> choices;  // the fixed set of values (CLI::IsMember), if any
  std::string help;
  std::string default_value;
  std::string group;  // --help's heading ("Options", "Debugging")
  bool positional = false;
  bool repeatable = false;
  bool required = false;
};

// qvl itself (empty name) or one of its visible subcommands.
struct Command {
  std::string name;
  std::string help;
  std::vector<Arg> args;  // grouped as --help groups them, in its order
};

// --- The data walk over the CLI11 tree.

// An IsMember validator describes itself as "{a,b,c}" in the option's type name.
std::vector<std::string> choices_of(const std::string& type_name) {
  const size_t open = type_name.find('{'), close = type_name.find('}', open);
  if (open == std::string::npos || close == std::string::npos) return {};
  std::vector<std::string> out;
  std::string item;
  for (char c : type_name.substr(open + 1, close - open - 1)) {
    if (c == ',') {
      out.push_back(item);
      item.clear();
    } else {
      item += c;
    }
  }
  out.push_back(item);
  return out;
}

Arg describe(const CLI::Option& opt) {
  Arg a;
  for (const std::string& s : opt.get_snames()) a.names.push_back("-" + s);
  for (const std::string& l : opt.get_lnames()) a.names.push_back("--" + l);
  a.positional = a.names.empty();
  if (a.positional) a.names.push_back(opt.get_name());
  const std::string type = opt.get_type_name();
  if (opt.get_items_expected_max() > 0) a.kind = type.substr(0, type.find(':'));
  a.choices = choices_of(type);
  a.help = opt.get_description();
  a.default_value = opt.get_default_str();
  a.group = opt.get_group();
  a.repeatable = opt.get_expected_max() > 1;
  a.required = opt.get_required();
  return a;
}

// The options and positionals --help shows, its groups in order of first appearance.
std::vector<Arg> args_of(const CLI::App& app) {
  std::vector<std::string> groups;
  std::vector<Arg> all;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_group().empty()) continue;  // hidden
    all.push_back(describe(*opt));
    if (std::find(groups.begin(), groups.end(), opt->get_group()) == groups.end()) groups.push_back(opt->get_group());
  }
  std::vector<Arg> sorted;
  for (const std::string& g : groups)
    for (const Arg& a : all)
      if (a.group == g) sorted.push_back(a);
  return sorted;
}

// qvl first, then its subcommands in --help's order (hidden ones, such as bench-run, left out).
std::vector<Command> commands_of(const CLI::App& app) {
  std::vector<Command> out{{"", app.get_description(), args_of(app)}};
  for (const CLI::App* sub : app.get_subcommands({}))
    if (!sub->get_group().empty()) out.push_back({sub->get_name(), sub->get_description(), args_of(*sub)});
  return out;
}

std::vector<std::string> command_names(const std::vector<Command>& commands) {
  std::vector<std::string> names;
  for (size_t i = 1; i < commands.size(); ++i) names.push_back(commands[i].name);
  return names;
}

// A description cut to its first clause (a "; " or ". " outside parentheses), for completion menus.
std::string summary(const std::string& help) {
  size_t end = 0;
  for (int depth = 0; end < help.size(); ++end) {
    depth += help[end] == '(' ? 1 : help[end] == ')' ? -1 : 0;
    if (depth == 0 && (help[end] == ';' || help[end] == '.') && end + 1 < help.size() && help[end + 1] == ' ') break;
  }
  std::string s = help.substr(0, end);
  if (s.size() > 80) s = s.substr(0, s.rfind(' ', 77)) + "...";
  return s;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

// --- roff (man 7 man).

std::string roff(const std::string& text) {
  std::string s = replace_all(replace_all(text, "\\", "\\e"), "-", "\\-");
  if (!s.empty() && (s[0] == '.' || s[0] == '\'')) s = "\\&" + s;
  return s;
}

std::string man_usage(const Command& c) {
  std::string usage = fmt::format("\\fBqvl {}\\fR [\\fIOPTIONS\\fR]", roff(c.name));
  for (const Arg& a : c.args)
    if (a.positional)
      usage += fmt::format(a.required ? " \\fI{}\\fR{}" : " [\\fI{}\\fR{}]", roff(a.names[0]), a.repeatable ? "..." : "");
  return usage;
}

void write_man_args(std::string& out, const std::vector<Arg>& args) {
  std::string group = "Options";
  for (const Arg& a : args) {
    if (a.group != group) out += fmt::format(".PP\n\\fI{}:\\fR\n", roff(a.group));
    group = a.group;
    std::vector<std::string> names;
    for (const std::string& n : a.names) names.push_back(fmt::format(a.positional ? "\\fI{}\\fR" : "\\fB{}\\fR", roff(n)));
    std::string value;
    if (!a.choices.empty()) value = " " + roff(fmt::format("{}", fmt::join(a.choices, "|")));
    else if (!a.kind.empty() && !a.positional) value = fmt::format(" \\fI{}\\fR", roff(a.kind));
    std::string help = a.help;
    if (!a.default_value.empty() && help.find("default") == std::string::npos)
      help += fmt::format(" (default: {})", a.default_value);
    out += fmt::format(".TP\n{}{}{}\n{}\n", fmt::join(names, ", "), value, a.repeatable ? " ..." : "", roff(help));
  }
}

std::string man_page(const std::vector<Command>& commands) {
  const Command& qvl = commands[0];
  std::string out = fmt::format(".TH QVL 1 \"\" \"qvl {}\" \"User Commands\"\n", QVL_VERSION);
  out += ".nh\n.ad l\n";  // no hyphenation inside flags and paths, ragged right
  out += fmt::format(".SH NAME\nqvl \\- {}\n", roff(qvl.help.substr(qvl.help.find(" - ") + 3)));
  out += ".SH SYNOPSIS\n\\fBqvl\\fR \\fICOMMAND\\fR [\\fIOPTIONS\\fR] [\\fIARGUMENTS\\fR]\n.br\n"
         "\\fBqvl help\\fR [\\fICOMMAND\\fR]\n.br\n\\fBqvl \\-\\-version\\fR\n";
  out += fmt::format(".SH DESCRIPTION\nThe commands are {}; each is described below, as \\fBqvl \\fICOMMAND\\fB \\-\\-help\\fR "
                     "describes it.\n",
                     roff(fmt::format("{}", fmt::join(command_names(commands), ", "))));
  out += ".SH OPTIONS\n";
  write_man_args(out, qvl.args);
  out += ".SH COMMANDS\n";
  for (size_t i = 1; i < commands.size(); ++i) {
    out += fmt::format(".SS \"qvl {}\"\n{}\n.PP\n{}\n", roff(commands[i].name), man_usage(commands[i]),
                       roff(commands[i].help));
    write_man_args(out, commands[i].args);
  }
  out += fmt::format(
      ".SH ENVIRONMENT\n.TP\n.B QVL_MODEL\nThe model folder when \\-\\-model is not given.\n"
      ".TP\n.B QVL_CACHE_DIR\nWhere derived files (parsed tokenizer, quantized weights, prompt cache) are kept "
      "instead of the model folder's .qvl\\-cache/ (or ~/.cache/qvl when that is read-only).\n"
      ".TP\n.B QVL_ISA\nForce a lower CPU kernel tier: avx2\\-vnni, avx2 or generic.\n"
      ".SH EXIT STATUS\n.TP\n{}\nSuccess.\n.TP\n{}\nAn error: bad input, missing model, output that cannot be "
      "written.\n.TP\n{}\nWrong command\\-line usage.\n.TP\n{}\nqvl ocr: at least one file got an error record.\n"
      ".TP\n{}\nqvl ocr: another run is writing the same \\-\\-output.\n.TP\n{}\nInterrupted.\n",
      int(kOk), int(kError), int(kUsage), int(kSomeFailed), int(kBusy), int(kInterrupted));
  return out;
}

// --- bash: one function; a value without a fixed set falls back to file names (-o default).

std::string bash_completion(const std::vector<Command>& commands) {
  const std::string names = fmt::format("{}", fmt::join(command_names(commands), " "));
  std::string values, flags;
  for (const Command& c : commands) {
    std::vector<std::string> all_flags, free_values;  // free: no fixed set, so file names (-o default)
    for (const Arg& a : c.args) {
      if (a.positional) continue;
      all_flags.insert(all_flags.end(), a.names.begin(), a.names.end());
      std::vector<std::string> cases;
      for (const std::string& n : a.names) cases.push_back(fmt::format("\"{} {}\"", c.name, n));
      if (!a.choices.empty())
        values += fmt::format("    {}) COMPREPLY=($(compgen -W \"{}\" -- \"$cur\")); return ;;\n",
                              fmt::join(cases, "|"), fmt::join(a.choices, " "));
      else if (!a.kind.empty())
        free_values.insert(free_values.end(), cases.begin(), cases.end());
    }
    if (!free_values.empty()) values += fmt::format("    {}) return ;;\n", fmt::join(free_values, "|"));
    flags += fmt::format("    \"{}\") words=\"{}\" ;;\n", c.name, fmt::join(all_flags, " "));
  }
  return fmt::format(
      "# bash completion for qvl (written by qvl --completion bash)\n"
      "_qvl() {{\n"
      "  local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} command=\"\" words=\"\"\n"
      "  # --flag=value: bash splits it into --flag, =, value\n"
      "  if [[ $cur == = ]]; then cur=\"\"; elif [[ $prev == = ]]; then prev=${{COMP_WORDS[COMP_CWORD-2]}}; fi\n"
      "  # The command comes first: qvl COMMAND [OPTIONS] [ARGUMENTS]\n"
      "  (( COMP_CWORD > 1 )) && command=${{COMP_WORDS[1]}}\n"
      "  case \"$command $prev\" in\n{}"
      "  esac\n"
      "  case \"$command\" in\n{}"
      "    help) [[ $COMP_CWORD == 2 ]] && COMPREPLY=($(compgen -W \"{}\" -- \"$cur\")); return ;;\n"
      "  esac\n"
      "  if [[ $cur == -* ]]; then\n"
      "    COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
      "  elif [[ -z $command ]]; then\n"
      "    COMPREPLY=($(compgen -W \"{} help\" -- \"$cur\"))\n"
      "  fi\n"
      "}}\n"
      "complete -o default -F _qvl qvl\n",
      values, flags, names, names);
}

// --- zsh: _arguments specs per command.

std::string zsh_quote(const std::string& s) { return replace_all(s, "'", "'\\''"); }
std::string zsh_help(const std::string& help) {
  return zsh_quote(replace_all(replace_all(replace_all(summary(help), "\\", "\\\\"), "[", "\\["), "]", "\\]"));
}

std::string zsh_spec(const Arg& a) {
  // A number gets no completion, only its kind as the message.
  const bool number = a.kind == "INT" || a.kind == "UINT" || a.kind == "FLOAT";
  const std::string action = !a.choices.empty() ? fmt::format("({})", fmt::join(a.choices, " "))
                             : number           ? " "
                                                : "_files";
  if (a.positional) return fmt::format("'{}:{}:{}'", a.repeatable ? "*" : "", a.names[0], action);
  std::string names = a.names.size() == 1 ? a.names[0] : fmt::format("{{{}}}", fmt::join(a.names, ","));
  std::string prefix = a.repeatable ? "'*'" : a.names.size() > 1 ? fmt::format("'({})'", fmt::join(a.names, " ")) : "";
  std::string value = a.kind.empty() ? "" : fmt::format(":{}:{}", zsh_quote(replace_all(a.kind, ":", "\\:")), action);
  return fmt::format("{}{}'[{}]{}'", prefix, names, zsh_help(a.help), value);
}

std::string zsh_arguments(const Command& c, const char* indent) {
  std::string out;
  for (const Arg& a : c.args) out += fmt::format(" \\\n{}{}", indent, zsh_spec(a));
  return out;
}

std::string zsh_completion(const std::vector<Command>& commands) {
  std::string described, cases;
  for (size_t i = 1; i < commands.size(); ++i) {
    described += fmt::format("    '{}:{}'\n", commands[i].name, zsh_quote(summary(commands[i].help)));
    cases += fmt::format("        {}) _arguments -s{} ;;\n", commands[i].name, zsh_arguments(commands[i], "            "));
  }
  return fmt::format(
      "#compdef qvl\n"
      "# zsh completion for qvl (written by qvl --completion zsh)\n"
      "_qvl() {{\n"
      "  local curcontext=$curcontext state line\n"
      "  local -a commands\n"
      "  commands=(\n{}    'help:Describe a command'\n  )\n"
      "  _arguments -C{} \\\n    '1:command:->command' \\\n    '*::argument:->argument'\n"
      "  case $state in\n"
      "    command) _describe -t commands 'qvl command' commands ;;\n"
      "    argument)\n"
      "      case $line[1] in\n{}"
      "        help) _describe -t commands 'qvl command' commands ;;\n"
      "      esac ;;\n"
      "  esac\n"
      "}}\n"
      "_qvl \"$@\"\n",
      described, zsh_arguments(commands[0], "    "), cases);
}

// --- fish: one `complete` line per command and flag.

std::string fish_quote(const std::string& s) {
  return "'" + replace_all(replace_all(s, "\\", "\\\\"), "'", "\\'") + "'";
}

std::string fish_completion(const std::vector<Command>& commands) {
  const std::string names = fmt::format("{}", fmt::join(command_names(commands), " "));
  std::string out = "# fish completion for qvl (written by qvl --completion fish)\n";
  for (size_t i = 1; i < commands.size(); ++i)
    out += fmt::format("complete -c qvl -f -n __fish_use_subcommand -a {} -d {}\n", commands[i].name,
                       fish_quote(summary(commands[i].help)));
  out += "complete -c qvl -f -n __fish_use_subcommand -a help -d 'Describe a command'\n";
  out += fmt::format("complete -c qvl -f -n '__fish_seen_subcommand_from help' -a {}\n", fish_quote(names));
  for (const Command& c : commands) {
    const std::string when =
        c.name.empty() ? "__fish_use_subcommand" : fmt::format("'__fish_seen_subcommand_from {}'", c.name);
    for (const Arg& a : c.args) {
      if (a.positional) continue;
      std::string line = fmt::format("complete -c qvl -n {}", when);
      for (const std::string& n : a.names) line += (n[1] == '-' ? " -l " + n.substr(2) : " -s " + n.substr(1));
      if (!a.choices.empty()) line += fmt::format(" -x -a {}", fish_quote(fmt::format("{}", fmt::join(a.choices, " "))));
      else if (!a.kind.empty()) line += " -r";
      out += line + " -d " + fish_quote(summary(a.help)) + "\n";
    }
  }
  return out;
}

// Prints a document and ends the parse as --version does (exit 0, no command run).
[[noreturn]] void print_and_exit(const std::string& text) {
  std::fputs(text.c_str(), stdout);
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) throw Error("cannot write to stdout");
  throw CLI::Success();
}

}  // namespace

void register_docs(CLI::App& app) {
  // Hidden (no group): what they print is for the build, not for people.
  app.add_flag_callback("--print-man", [&app] { print_and_exit(man_page(commands_of(app))); })->group("");
  app.add_option_function<std::string>(
         "--completion",
         [&app](const std::string& shell) {
           const std::vector<Command> commands = commands_of(app);
           print_and_exit(shell == "bash" ? bash_completion(commands)
                          : shell == "zsh" ? zsh_completion(commands)
                                           : fish_completion(commands));
         })
      ->check(CLI::IsMember({"bash", "zsh", "fish"}))
      ->group("");
}

}  // namespace qvl::app
