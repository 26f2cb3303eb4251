#include "qvl/io/file_scan.h"

#include <dirent.h>
#include <fnmatch.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include "qvl/error.h"

namespace qvl {
namespace {

std::string lowercase(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string join_path(const std::string& dir, const std::string& name) {
  return ends_with(dir, "/") ? dir + name : dir + "/" + name;
}

class DirectoryWalker {
 public:
  // `root` is the folder argument: paths below it get their `relative` from it.
  DirectoryWalker(const ScanOptions& options, const std::string& root, std::vector<ScannedFile>& out)
      : options_(options), root_prefix_(ends_with(root, "/") ? root.size() : root.size() + 1), out_(out) {}

  void walk(const std::string& dir, const struct stat& dir_stat) {
    // Identified by device and inode, so a loop of symbolic links ends here.
    if (!visited_.insert({dir_stat.st_dev, dir_stat.st_ino}).second) return;
    std::vector<std::string> names;
    if (!list(dir, names)) return;
    std::sort(names.begin(), names.end());  // std::string compares bytes as unsigned char
    for (const std::string& name : names) {
      const std::string path = join_path(dir, name);
      struct stat st {};
      if (::stat(path.c_str(), &st) != 0) {
        // A dangling link or a file that vanished: let the caller report it if it wanted it.
        if (scan_takes(name, options_)) take(path);
        continue;
      }
      if (S_ISDIR(st.st_mode)) {
        if (options_.recursive) walk(path, st);
      } else if (scan_takes(name, options_)) {
        take(path);
      }
    }
  }

 private:
  // Every path below the root starts with the root and one '/' (join_path).
  void take(const std::string& path) { out_.push_back({path, "", path.substr(root_prefix_)}); }

  bool list(const std::string& dir, std::vector<std::string>& names) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) {
      const std::string relative = dir.size() > root_prefix_ ? dir.substr(root_prefix_) : dir;
      out_.push_back({dir, dir + ": cannot list directory: " + std::strerror(errno), relative});
      return false;
    }
    while (const dirent* entry = ::readdir(d)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(d);
    return true;
  }

  const ScanOptions& options_;
  size_t root_prefix_;
  std::vector<ScannedFile>& out_;
  std::set<std::pair<dev_t, ino_t>> visited_;
};

}  // namespace

bool has_image_extension(const std::string& file_name) {
  const std::string lower = lowercase(file_name);
  for (const char* ext : {".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff", ".bmp", ".gif", ".pdf"})
    if (ends_with(lower, ext)) return true;
  return false;
}

bool scan_takes(const std::string& file_name, const ScanOptions& options) {
  if (options.glob.empty()) return has_image_extension(file_name);
  // In any case, as the default extensions are: --glob '*.PNG' takes a.png too.
  return ::fnmatch(options.glob.c_str(), file_name.c_str(), FNM_CASEFOLD) == 0;
}

std::vector<ScannedFile> expand_inputs(const std::vector<std::string>& inputs, const ScanOptions& options) {
  std::vector<ScannedFile> files;
  for (const std::string& input : inputs) {
    struct stat st {};
    if (::stat(input.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      // A fresh walker per input: a folder named twice is scanned twice, as asked.
      DirectoryWalker(options, input, files).walk(input, st);
    } else {
      files.push_back({input, "", input});
    }
  }
  return files;
}

void refuse_output_among_inputs(const std::vector<ScannedFile>& inputs, uint64_t device, uint64_t inode,
                                const std::string& output_name) {
  for (const ScannedFile& in : inputs) {
    struct stat st {};
    if (::stat(in.path.c_str(), &st) == 0 && uint64_t(st.st_dev) == device && uint64_t(st.st_ino) == inode)
      throw Error(output_name + " is the same file as the input " + in.path +
                  ": qvl ocr never writes over its inputs; choose an output outside them");
  }
}

std::vector<std::string> split_path_lines(const std::string& text) {
  std::vector<std::string> paths;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) paths.push_back(std::move(line));
    start = end + 1;
  }
  return paths;
}

}  // namespace qvl
