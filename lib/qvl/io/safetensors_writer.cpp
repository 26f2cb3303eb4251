#include "qvl/io/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "qvl/error.h"

namespace qvl {
namespace {

std::string describe_errno(int err) {
  if (err == ENOSPC || err == EDQUOT) return "disk full";
  return std::strerror(err);
}

int open_for_writing(const std::string& tmp_path, const std::string& path) {
  int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path + ": cannot write: " + std::strerror(errno));
  return fd;
}

}  // namespace

uint64_t tensor_bytes(const TensorEntry& t) {
  uint64_t n = dtype_size(t.dtype);
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  return n;
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<TensorEntry>& tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), tmp_path_(path + ".tmp") {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  for (const TensorEntry& t : tensors) {
    if (t.name == "__metadata__" || header.contains(t.name)) throw Error(path + ": tensor name '" + t.name + "' used twice");
    const uint64_t n = tensor_bytes(t);
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {data_bytes_, data_bytes_ + n}}};
    data_bytes_ += n;
  }
  std::string text = header.dump();
  // Padding the header keeps every tensor's data 8-byte aligned in a mapping.
  while (text.size() % 8 != 0) text.push_back(' ');
  fd_ = open_for_writing(tmp_path_, path_);
  output_ = std::make_unique<ChunkedOutput>(fd_);
  const uint64_t header_len = text.size();
  write_all(&header_len, sizeof header_len);  // little-endian on every supported host
  write_all(text.data(), text.size());
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

void SafetensorsWriter::fail(const std::string& what) {
  ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_path_.c_str());
  throw Error(path_ + ": " + what);
}

void SafetensorsWriter::write_all(const void* data, size_t nbytes) {
  if (const int err = output_->append(data, nbytes)) fail("write failed: " + describe_errno(err));
}

void SafetensorsWriter::append(const void* data, size_t nbytes) {
  if (fd_ < 0) throw Error(path_ + ": append after the file was finished or failed");
  if (written_ + nbytes > data_bytes_)
    fail("more tensor data than the header announces (" + std::to_string(data_bytes_) + " bytes)");
  write_all(data, nbytes);
  written_ += nbytes;
}

void SafetensorsWriter::finish() {
  if (fd_ < 0) throw Error(path_ + ": finish after the file was finished or failed");
  if (written_ != data_bytes_)
    fail("only " + std::to_string(written_) + " of " + std::to_string(data_bytes_) + " data bytes were written");
  if (const int err = output_->flush()) fail("write failed: " + describe_errno(err));
  // Without the sync a crash after the rename could leave an empty file under the real name.
  if (::fdatasync(fd_) != 0) fail("flush failed: " + describe_errno(errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    ::unlink(tmp_path_.c_str());
    throw Error(path_ + ": close failed: " + describe_errno(errno));
  }
  fd_ = -1;
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_path_.c_str());
    throw Error(path_ + ": cannot rename into place: " + std::strerror(err));
  }
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorEntry> entries;
  for (const TensorToWrite& t : tensors) entries.push_back({t.name, t.dtype, t.shape});
  SafetensorsWriter out(path, entries, metadata);
  for (size_t i = 0; i < tensors.size(); ++i) out.append(tensors[i].data, tensor_bytes(entries[i]));
  out.finish();
}

void write_file_atomically(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  int fd = open_for_writing(tmp, path);
  const char* p = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(path + ": write failed: " + describe_errno(err));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  const bool synced = ::fdatasync(fd) == 0;
  const int sync_err = errno;
  if (::close(fd) != 0 || !synced) {
    const int err = synced ? errno : sync_err;
    ::unlink(tmp.c_str());
    throw Error(path + ": flush failed: " + describe_errno(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(path + ": cannot rename into place: " + std::strerror(err));
  }
}

}  // namespace qvl
