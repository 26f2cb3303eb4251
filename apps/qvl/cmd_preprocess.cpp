#include "commands.h"
namespace qvl::app {
void register_preprocess(CLI::App&, int&) {}  // placeholder until image preprocessing lands
}
