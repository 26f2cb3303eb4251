// SHA-256 (OpenSSL EVP) as lowercase hex: how `qvl ocr` identifies a file's
// bytes, so a renamed or copied image is recognised and a changed one is not.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace qvl {

// Incremental hashing, for data that arrives in pieces.
class Sha256 {
 public:
  Sha256();  // throws qvl::Error if OpenSSL cannot set up the digest
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t size);
  // 64 lowercase hex digits. Ends the computation: call nothing else afterwards.
  std::string hex_digest();

 private:
  struct EvpContext;
  EvpContext* ctx_;
};

std::string sha256_hex(const void* data, size_t size);
std::string sha256_hex(const std::string& bytes);
// Reads the file in chunks; throws qvl::Error naming the path if it cannot.
std::string sha256_file_hex(const std::string& path);

// Frees the calling thread's OpenSSL state (its error queue, ~900 bytes).
// OpenSSL frees it in the thread's exit handlers, which for a detached thread
// may run after the process has begun to exit: LeakSanitizer then reports it
// (seen once in the sanitized CLI tests). A detached thread that hashed calls
// this before it says it is done.
void release_thread_hash_state();

}  // namespace qvl
