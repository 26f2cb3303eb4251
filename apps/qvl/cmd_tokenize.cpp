#include "commands.h"
namespace qvl::app {
void register_tokenize(CLI::App&, int&) {}  // placeholder until the tokenizer lands
}
