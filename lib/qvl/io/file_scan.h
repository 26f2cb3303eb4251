// Turns the paths given on a command line into the list of files to process,
// in an order that does not depend on the file system: inputs in the order
// given, each directory's entries sorted byte-wise.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qvl {

struct ScanOptions {
  bool recursive = false;  // descend into subdirectories (at their place in the sorted order)
  std::string glob;        // "": take image extensions; else fnmatch(3) on the file name, ignoring case
};

struct ScannedFile {
  std::string path;
  std::string error;  // non-empty when `path` is a directory that could not be listed
  // `path` relative to the folder argument it was found under ("sub/a.png" for
  // "archive/sub/a.png" found in "archive/"); an argument that is not a folder
  // is its own `relative`. What `qvl ocr --shard` hashes, so that the split does
  // not depend on where the archive is mounted.
  std::string relative;
};

// .png, .jpg, .jpeg, .webp, .tif, .tiff, .bmp, .gif or .pdf, in any case.
bool has_image_extension(const std::string& file_name);
// Whether a directory scan takes a file of this name.
bool scan_takes(const std::string& file_name, const ScanOptions& options);

// Every input that is not a directory is kept as given, whatever its name or
// whether it exists (the caller checks the content and reports what is wrong).
// A directory contributes the files scan_takes() accepts, "dir/name" joined
// without doubling a trailing slash; symbolic links are followed, but a
// directory already visited (a link loop) is not scanned twice.
std::vector<ScannedFile> expand_inputs(const std::vector<std::string>& inputs, const ScanOptions& options);

// Throws qvl::Error when one of `inputs` is the file with this device and
// inode (links followed): `output_name` ("--output x", "stdout") would be
// written over an input.
void refuse_output_among_inputs(const std::vector<ScannedFile>& inputs, uint64_t device, uint64_t inode,
                                const std::string& output_name);

// Newline-separated paths (as read from stdin): a trailing '\r' is dropped and
// blank lines are skipped; everything else, spaces included, is part of the path.
std::vector<std::string> split_path_lines(const std::string& text);

}  // namespace qvl
