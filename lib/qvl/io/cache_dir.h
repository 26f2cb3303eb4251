// Where qvl keeps what it derives from a model folder (the TorchScript vision
// module, the int8 weights): one folder per model, chosen in one place for
// every cache.
#pragma once
#include <string>

namespace qvl {

// `chosen` when not empty, else $QVL_CACHE_DIR, else <model_dir>/.qvl-cache
// when it can be written, else $XDG_CACHE_HOME/qvl/<fingerprint> (default
// ~/.cache/qvl/<fingerprint>). The folder is created if missing, but never
// the home folder (or $XDG_CACHE_HOME's parent) it would be in. Throws
// qvl::Error when the chosen folder, or every default one, cannot be written.
std::string model_cache_dir(const std::string& model_dir, const std::string& fingerprint,
                            const std::string& chosen = "");

}  // namespace qvl
