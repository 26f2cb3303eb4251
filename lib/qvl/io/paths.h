// What is at a path, without opening it (stat(2), links followed).
#pragma once
#include <string>

namespace qvl {

bool path_exists(const std::string& path);      // anything: file, folder, device
bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);

}  // namespace qvl
