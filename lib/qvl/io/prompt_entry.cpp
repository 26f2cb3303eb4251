#include "qvl/io/prompt_entry.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/core.h>

#include <cerrno>
#include <cstring>

#include "qvl/error.h"

namespace qvl {
namespace {

constexpr char kMagic[8] = {'Q', 'V', 'L', 'P', 'K', 'V', '\r', '\n'};
constexpr uint64_t kAlignment = 64;
constexpr uint64_t kChecksumFrom = 16;  // the checksum covers everything after itself and the magic
constexpr uint64_t kMul1 = 0x9fb21c651e98df25ull, kMul2 = 0xff51afd7ed558ccdull;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
// A bijection of 64-bit words that spreads every input bit over the output.
uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= kMul2;
  x ^= x >> 29;
  x *= kMul1;
  return x ^ (x >> 32);
}
uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint64_t align_up(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

template <class T>
void append(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// The bytes from offset 16 up to the payload.
std::string header_bytes(const PromptEntryHeader& h, uint64_t file_size) {
  std::string out;
  append(out, file_size);
  append(out, kPromptEntryVersion);
  append(out, uint32_t(0));
  append(out, uint64_t(h.key.size()));
  out += h.key;
  append(out, uint64_t(h.tokens.size()));
  out.append(reinterpret_cast<const char*>(h.tokens.data()), h.tokens.size() * sizeof(int32_t));
  for (int64_t v : {h.next_position, h.layout.layers, h.layout.kv_heads, h.layout.head_dim, h.layout.value_bytes})
    append(out, v);
  out.resize(align_up(kChecksumFrom + out.size()) - kChecksumFrom, '\0');
  return out;
}

// Reads header fields in order without running past `end`.
class Cursor {
 public:
  Cursor(const uint8_t* p, const uint8_t* end, const std::string& path) : p_(p), end_(end), path_(path) {}
  void bytes(void* out, uint64_t n) {
    need(n);
    if (n == 0) return;  // out may be an empty vector's null data()
    std::memcpy(out, p_, n);
    p_ += n;
  }
  template <class T>
  T value() {
    T v;
    bytes(&v, sizeof v);
    return v;
  }
  const uint8_t* at() const { return p_; }

 private:
  void need(uint64_t n) const {
    if (n > uint64_t(end_ - p_)) throw Error(path_ + ": prompt cache entry is truncated");
  }
  const uint8_t* p_;
  const uint8_t* end_;
  const std::string& path_;
};

class FileWriter {
 public:
  explicit FileWriter(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create");
  }
  ~FileWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const void* data, size_t size, uint64_t offset) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    while (size > 0) {
      const ssize_t n = ::pwrite(fd_, p, size, off_t(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("cannot write");
      p += n;
      size -= size_t(n);
      offset += uint64_t(n);
    }
  }
  void close() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("cannot write");
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw Error(fmt::format("{} {}: {}", what, path_, std::strerror(errno ? errno : EIO)));
  }
  std::string path_;
  int fd_ = -1;
};

}  // namespace

void Checksum64::block(const uint8_t* p) {
  // Each step is a bijection of the lane for a fixed word and of the word for
  // a fixed lane, so a changed word always leaves a changed lane.
  for (int i = 0; i < 4; ++i) lanes_[i] = rotl(lanes_[i] ^ (load64(p + 8 * i) * kMul1), 29) * kMul2;
}

void Checksum64::update(const void* data, size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  length_ += size;
  if (buffered_ > 0) {
    const size_t take = std::min(size, sizeof buffer_ - buffered_);
    std::memcpy(buffer_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    size -= take;
    if (buffered_ < sizeof buffer_) return;
    block(buffer_);
    buffered_ = 0;
  }
  for (; size >= 32; p += 32, size -= 32) block(p);
  std::memcpy(buffer_, p, size);
  buffered_ = size;
}

uint64_t Checksum64::digest() const {
  Checksum64 tail = *this;
  if (tail.buffered_ > 0) {  // the last partial block, zero-padded (the length tells it apart)
    std::memset(tail.buffer_ + tail.buffered_, 0, sizeof buffer_ - tail.buffered_);
    tail.block(tail.buffer_);
  }
  uint64_t h = mix(length_ + kMul2);
  for (uint64_t lane : tail.lanes_) h = rotl(h ^ mix(lane), 27) * kMul1 + kMul2;
  return mix(h);
}

uint64_t checksum64(const void* data, size_t size) {
  Checksum64 c;
  c.update(data, size);
  return c.digest();
}

uint64_t PromptEntryHeader::block_bytes() const {
  return uint64_t(layout.kv_heads) * tokens.size() * uint64_t(layout.head_dim) * uint64_t(layout.value_bytes);
}

void write_prompt_entry(const std::string& path, const PromptEntryHeader& header,
                        const std::vector<ByteRange>& payload) {
  uint64_t payload_size = 0;
  for (const ByteRange& r : payload) payload_size += r.size;
  if (payload_size != header.payload_bytes())
    throw Error(fmt::format("prompt cache entry: {} payload bytes given, the header describes {}", payload_size,
                            header.payload_bytes()));
  // The header's length does not depend on the size it records.
  const uint64_t header_size = header_bytes(header, 0).size();
  const uint64_t file_size = kChecksumFrom + header_size + payload_size;
  const std::string head = header_bytes(header, file_size);

  FileWriter out(path);
  Checksum64 sum;
  uint64_t offset = kChecksumFrom;
  out.write(head.data(), head.size(), offset);
  sum.update(head.data(), head.size());
  offset += head.size();
  for (const ByteRange& r : payload) {
    out.write(r.data, r.size, offset);
    sum.update(r.data, r.size);
    offset += r.size;
  }
  const uint64_t checksum = sum.digest();
  out.write(&checksum, sizeof checksum, 8);
  out.write(kMagic, sizeof kMagic, 0);  // last: a file without its magic is never taken for an entry
  out.close();
}

PromptEntryFile::PromptEntryFile(const std::string& path) : file_(path) {
  const uint8_t* base = file_.data();
  const uint64_t size = file_.size();
  if (size < 32 || std::memcmp(base, kMagic, sizeof kMagic) != 0)
    throw Error(path + ": not a prompt cache entry (no magic)");
  Cursor c(base + 8, base + size, path);
  const uint64_t checksum = c.value<uint64_t>();
  const uint64_t recorded_size = c.value<uint64_t>();
  if (recorded_size != size)
    throw Error(fmt::format("{}: prompt cache entry is {} bytes, its header says {}", path, size, recorded_size));
  const uint32_t version = c.value<uint32_t>();
  c.value<uint32_t>();
  if (version != kPromptEntryVersion)
    throw Error(fmt::format("{}: prompt cache entry has format version {}, qvl reads {}", path, version,
                            kPromptEntryVersion));
  if (checksum64(base + kChecksumFrom, size - kChecksumFrom) != checksum)
    throw Error(path + ": prompt cache entry is damaged (checksum mismatch)");

  const uint64_t key_size = c.value<uint64_t>();
  if (key_size > size) throw Error(path + ": prompt cache entry is truncated");
  header_.key.resize(key_size);
  c.bytes(header_.key.data(), key_size);
  const uint64_t n_tokens = c.value<uint64_t>();
  if (n_tokens > size / sizeof(int32_t)) throw Error(path + ": prompt cache entry is truncated");
  header_.tokens.resize(n_tokens);
  c.bytes(header_.tokens.data(), n_tokens * sizeof(int32_t));
  header_.next_position = c.value<int64_t>();
  KvLayout& l = header_.layout;
  l.layers = c.value<int64_t>();
  l.kv_heads = c.value<int64_t>();
  l.head_dim = c.value<int64_t>();
  l.value_bytes = c.value<int64_t>();
  const bool sane = l.layers > 0 && l.layers < 4096 && l.kv_heads > 0 && l.kv_heads < 4096 && l.head_dim > 0 &&
                    l.head_dim < 65536 && (l.value_bytes == 2 || l.value_bytes == 4);
  if (!sane) throw Error(path + ": prompt cache entry's payload does not match its header");
  const uint64_t payload_offset = align_up(uint64_t(c.at() - base));
  // In 128-bit arithmetic: a hostile header must not wrap around to the right size.
  const unsigned __int128 payload = (unsigned __int128)(2 * l.layers) * uint64_t(l.kv_heads) * n_tokens *
                                    uint64_t(l.head_dim) * uint64_t(l.value_bytes);
  if (payload_offset > size || payload != size - payload_offset)
    throw Error(path + ": prompt cache entry's payload does not match its header");
  payload_ = base + payload_offset;
}

const uint8_t* PromptEntryFile::block(int64_t layer, int kind) const {
  return payload_ + (uint64_t(layer) * 2 + uint64_t(kind)) * header_.block_bytes();
}

}  // namespace qvl
