#include "qvl/kernels/cache_file.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "qvl/error.h"
#include "qvl/io/chunked_output.h"
#include "qvl/io/content_hash.h"
#include "qvl/kernels/parallel.h"

namespace qvl::kernels::cache_file {
namespace {

constexpr uint64_t kAlignment = 64;  // every data block starts on a cache line
inline uint64_t align_up(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

class Writer {
 public:
  explicit Writer(const std::string& path);  // creates path + ".tmp"
  ~Writer();                                 // removes the temporary unless commit() ran
  void bytes(const void* data, size_t size);
  template <class T>
  void value(const T& v) { bytes(&v, sizeof v); }
  void pad_to(uint64_t offset);  // zeros up to `offset`
  uint64_t written() const { return output_.size(); }
  void commit();  // closes the temporary and renames it to the path

 private:
  std::string path_, temporary_;
  int fd_;
  ChunkedOutput output_;
  bool committed_ = false;
};

// Collects header fields in memory, so their checksum can be written before them.
class HeaderBytes {
 public:
  void bytes(const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    bytes_.insert(bytes_.end(), p, p + size);
  }
  template <class T>
  void value(const T& v) { bytes(&v, sizeof v); }
  const std::vector<uint8_t>& all() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// Reads header fields in order; `kind` names the file in errors ("int8 cache").
class Reader {
 public:
  Reader(const MappedFile& file, const char* kind) : file_(file), kind_(kind) {}
  void bytes(void* out, size_t size);
  template <class T>
  T value() {
    T v;
    bytes(&v, sizeof v);
    return v;
  }
  std::string string(uint64_t length);
  size_t offset() const { return offset_; }

 private:
  const MappedFile& file_;
  const char* kind_;
  size_t offset_ = 0;
};


Writer::Writer(const std::string& path)
    : path_(path),
      temporary_(path + ".tmp"),
      fd_(::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)),
      output_(fd_) {
  if (fd_ < 0) throw Error(fmt::format("cannot create {}: {}", temporary_, std::strerror(errno)));
}

Writer::~Writer() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  std::remove(temporary_.c_str());
}

void Writer::bytes(const void* data, size_t size) {
  if (const int err = output_.append(data, size))
    throw Error(fmt::format("cannot write {}: {}", temporary_, std::strerror(err)));
}

void Writer::pad_to(uint64_t offset) {
  static const char zeros[kAlignment] = {};
  while (written() < offset) bytes(zeros, std::min<uint64_t>(offset - written(), kAlignment));
}

void Writer::commit() {
  const int err = output_.flush();
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 || err != 0)
    throw Error(fmt::format("cannot write {}: {}", temporary_, std::strerror(err != 0 ? err : errno)));
  if (std::rename(temporary_.c_str(), path_.c_str()) != 0)
    throw Error(fmt::format("cannot rename {} to {}: {}", temporary_, path_, std::strerror(errno)));
  committed_ = true;
}

void Reader::bytes(void* out, size_t size) {
  if (size > file_.size() - offset_)
    throw Error(fmt::format("{}: {} header is truncated at byte {}", file_.path(), kind_, offset_));
  std::memcpy(out, file_.data() + offset_, size);
  offset_ += size;
}

std::string Reader::string(uint64_t length) {
  if (length > file_.size() - offset_)
    throw Error(fmt::format("{}: {} header is truncated at byte {}", file_.path(), kind_, offset_));
  std::string s(reinterpret_cast<const char*>(file_.data() + offset_), length);
  offset_ += length;
  return s;
}

struct EntryHeader {
  MatrixShape shape;
  uint64_t values_offset, params_offset;
  uint64_t values_hash, params_hash;  // content_hash of each block
};

// The fixed start: magic, u32 version, u64 header hash. The hash covers the
// rest of the header (count, tag, entries with their blocks' hashes), so a
// tag edited to name other weights, or a damaged entry, is caught.
constexpr uint64_t kHashedHeaderStart = 8 + 4 + 8;

}  // namespace

void write_matrix_file(const std::string& path, const char (&magic)[8], uint32_t version,
                       const std::string& tag, const std::vector<MatrixBlocks>& matrices) {
  uint64_t header_size = kHashedHeaderStart + 4 + 8 + tag.size();
  for (const MatrixBlocks& m : matrices) header_size += 4 + m.name.size() + sizeof(EntryHeader);
  std::vector<EntryHeader> entries;
  uint64_t offset = align_up(header_size);
  for (const MatrixBlocks& m : matrices) {
    EntryHeader e{m.shape, offset, 0, content_hash(m.values, m.value_bytes), content_hash(m.params, m.param_bytes)};
    offset = align_up(offset + m.value_bytes);
    e.params_offset = offset;
    offset = align_up(offset + m.param_bytes);
    entries.push_back(e);
  }

  HeaderBytes hashed;
  hashed.value(uint32_t(matrices.size()));
  hashed.value(uint64_t(tag.size()));
  hashed.bytes(tag.data(), tag.size());
  for (size_t i = 0; i < matrices.size(); ++i) {
    hashed.value(uint32_t(matrices[i].name.size()));
    hashed.bytes(matrices[i].name.data(), matrices[i].name.size());
    hashed.value(entries[i]);
  }

  Writer out(path);
  out.bytes(magic, sizeof magic);
  out.value(version);
  out.value(content_hash(hashed.all().data(), hashed.all().size()));
  out.bytes(hashed.all().data(), hashed.all().size());
  for (size_t i = 0; i < matrices.size(); ++i) {
    out.pad_to(entries[i].values_offset);
    out.bytes(matrices[i].values, matrices[i].value_bytes);
    out.pad_to(entries[i].params_offset);
    out.bytes(matrices[i].params, matrices[i].param_bytes);
  }
  out.pad_to(offset);
  out.commit();
}

namespace {
// The fuzz build (scripts/fuzz.sh) ignores checksums, so that mutated files
// reach the checks behind them: block bounds and matrix layouts.
bool hash_differs(uint64_t computed, uint64_t recorded) {
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  (void)computed, (void)recorded;
  return false;
#else
  return computed != recorded;
#endif
}
}  // namespace

MatrixFileHeader read_matrix_file(const MappedFile& file, const char* kind, const char (&magic)[8],
                                  uint32_t version) {
  const std::string file_kind = fmt::format("{} cache", kind);
  Reader in(file, file_kind.c_str());
  char found[sizeof magic];
  in.bytes(found, sizeof found);
  if (std::memcmp(found, magic, sizeof magic) != 0)
    throw Error(fmt::format("{}: not a qvl {} cache file", file.path(), kind));
  const auto found_version = in.value<uint32_t>();
  if (found_version != version)
    throw Error(fmt::format("{}: {} cache version {} (this build reads version {})", file.path(), kind, found_version,
                            version));
  const auto header_hash = in.value<uint64_t>();
  const auto count = in.value<uint32_t>();
  MatrixFileHeader header;
  header.tag = in.string(in.value<uint64_t>());
  for (uint32_t i = 0; i < count; ++i) {
    MatrixEntry entry;
    entry.name = in.string(in.value<uint32_t>());
    const auto e = in.value<EntryHeader>();
    entry.shape = e.shape;
    entry.values_offset = e.values_offset;
    entry.params_offset = e.params_offset;
    entry.values_hash = e.values_hash;
    entry.params_hash = e.params_hash;
    header.entries.push_back(std::move(entry));
  }
  const uint8_t* hashed = file.data() + kHashedHeaderStart;
  if (hash_differs(content_hash(hashed, in.offset() - kHashedHeaderStart), header_hash))
    throw Error(fmt::format("{}: {} cache header does not match its checksum (damaged or edited)", file.path(), kind));
  return header;
}

void verify_blocks(const MappedFile& file, const std::vector<MatrixEntry>& entries,
                   const std::vector<std::pair<uint64_t, uint64_t>>& block_bytes) {
  // Matrices are independent: the threads hash them side by side. A whole
  // matrix is a piece (tens of MB on the 2B), so claiming them costs nothing.
  parallel_claim(int64_t(entries.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const MatrixEntry& e = entries[size_t(i)];
      const auto [value_bytes, param_bytes] = block_bytes[size_t(i)];
      const std::string what = fmt::format("{}: matrix '{}'", file.path(), e.name);
      const uint8_t* values = block(file, what, e.values_offset, value_bytes);
      const uint8_t* params = block(file, what, e.params_offset, param_bytes);
      if (hash_differs(content_hash(values, value_bytes), e.values_hash) ||
          hash_differs(content_hash(params, param_bytes), e.params_hash))
        throw Error(fmt::format("{} does not match its checksum (the file is damaged)", what));
    }
  });
}

const uint8_t* block(const MappedFile& file, const std::string& what, uint64_t offset, uint64_t size) {
  const bool fits = offset % kAlignment == 0 && offset <= file.size() && size <= file.size() - offset;
  if (!fits) throw Error(fmt::format("{} lies outside the file ({} bytes) or is misaligned", what, file.size()));
  return file.data() + offset;
}

}  // namespace qvl::kernels::cache_file
