// qvl tokenize: the token ids of a text, with the model folder's tokenizer.json.
// --bench / --bench-bytes time the encoder instead (MB/s on stderr).
#include <fmt/core.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "qvl/error.h"
#include "qvl/io/mapped_file.h"
#include "qvl/text/tokenizer.h"

namespace qvl::app {

namespace {

struct TokenizeOptions {
  std::string model_dir;
  std::string text;
  bool json = false;
  std::string bench_file;
  size_t bench_bytes = 0;
};

std::string read_stdin_bytes() {
  std::string data;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, stdin)) > 0) data.append(buffer, n);
  if (std::ferror(stdin)) throw Error("tokenize: cannot read the text from stdin");
  return data;
}

// Mixed English, Chinese, numbers and punctuation, the same for a given size.
std::string synthesize_mixed_text(size_t bytes) {
  static const char* const kPieces[] = {
      "The quick brown fox jumps over the lazy dog. ",
      "Invoice #4821, total $1,234.56 (tax included).\n",
      "这张发票的金额是多少？请分步骤推导图表趋势。",
      "中文测试：图里有几个苹果？",
      "She said: \"I'm sure it's fine, we'll see.\" ",
      "模型在中央处理器上运行，不需要图形处理器。",
      "def area(r):\n    return 3.14159 * r ** 2\n",
      "   indented line with trailing spaces   \n\n",
  };
  const size_t count = sizeof kPieces / sizeof kPieces[0];
  std::string text;
  uint32_t state = 12345;
  while (text.size() < bytes) {
    state = state * 1664525u + 1013904223u;
    text += kPieces[(state >> 16) % count];
  }
  return text;
}

// Wall time and this process's CPU time: the CPU figure does not depend on
// what else the machine is doing.
struct Stopwatch {
  std::chrono::steady_clock::time_point wall = std::chrono::steady_clock::now();
  std::clock_t cpu = std::clock();
  double wall_seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
  }
  double cpu_seconds() const { return double(std::clock() - cpu) / CLOCKS_PER_SEC; }
};

void run_bench(const TokenizeOptions& o, const std::string& model_dir) {
  Stopwatch load;
  Tokenizer tok = Tokenizer::load_from_model_dir(model_dir);
  fmt::print(stderr, "tokenizer.json loaded in {:.0f} ms (cpu {:.0f} ms)\n", 1e3 * load.wall_seconds(),
             1e3 * load.cpu_seconds());

  const std::string text = o.bench_file.empty() ? synthesize_mixed_text(o.bench_bytes) : read_text_file(o.bench_file);
  size_t tokens = 0;
  int rounds = 0;
  Stopwatch encode;
  do {  // at least half a second, for a stable figure
    tokens = tok.encode(text).size();
    ++rounds;
  } while (encode.wall_seconds() < 0.5);
  const double wall_s = encode.wall_seconds() / rounds, cpu_s = encode.cpu_seconds() / rounds;
  fmt::print(stderr, "encode: {} bytes -> {} tokens in {:.1f} ms: {:.2f} MB/s (cpu {:.1f} ms: {:.2f} MB/s)\n",
             text.size(), tokens, 1e3 * wall_s, text.size() / wall_s / 1e6, 1e3 * cpu_s, text.size() / cpu_s / 1e6);
}

void run_tokenize(const TokenizeOptions& o, bool has_text) {
  const std::string model_dir = resolve_model_dir_for_files(o.model_dir);
  if (!o.bench_file.empty() || o.bench_bytes > 0) return run_bench(o, model_dir);
  if (!has_text) throw Error("tokenize: give the TEXT to tokenize, or - to read it from stdin");

  Tokenizer tok = Tokenizer::load_from_model_dir(model_dir);
  const std::vector<TokenId> ids = tok.encode(o.text == "-" ? read_stdin_bytes() : o.text);
  std::string out = o.json ? "{\"ids\":[" : "";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += o.json ? "," : " ";
    out += std::to_string(ids[i]);
  }
  out += o.json ? "]}\n" : "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace

void register_tokenize(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
  cmd->add_option("--model", opts->model_dir, "Model folder (default: $QVL_MODEL or models/Qwen3-VL-2B-Instruct)");
  cmd->add_flag("--json", opts->json, "Print {\"ids\":[...]}");
  cmd->add_option("--bench", opts->bench_file, "Time encoding the text of FILE; MB/s on stderr")
      ->check(CLI::ExistingFile);
  cmd->add_option("--bench-bytes", opts->bench_bytes, "Time encoding N bytes of made-up English/Chinese text")
      ->check(integer_in(1, int64_t(1) << 34));
  CLI::Option* text = cmd->add_option("text", opts->text, "Text to tokenize, or - to read it from stdin");
  cmd->callback([opts, text, &exit_code] {
    run_tokenize(*opts, text->count() > 0);
    exit_code = kOk;
  });
}

}  // namespace qvl::app
