// scripts/export_torchscript.py, compiled into the binary so that qvl can build
// its TorchScript vision module without the source tree.
#pragma once
#include <string>
#include <string_view>

namespace qvl {

std::string_view export_script_text();
// A short hash of the script's text. It is part of every cached module's name,
// so any edit to the script makes old modules stale.
std::string export_script_version();

}  // namespace qvl
