#include "qvl/io/sha256.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "qvl/error.h"
#include "qvl/io/mapped_file.h"

namespace qvl {

struct Sha256::EvpContext {
  EVP_MD_CTX* md = nullptr;
};

Sha256::Sha256() : ctx_(new EvpContext) {
  ctx_->md = EVP_MD_CTX_new();
  if (!ctx_->md || EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx_->md);
    delete ctx_;
    throw Error("OpenSSL could not start a SHA-256 digest");
  }
}

Sha256::~Sha256() {
  EVP_MD_CTX_free(ctx_->md);
  delete ctx_;
}

void Sha256::update(const void* data, size_t size) {
  if (size > 0 && EVP_DigestUpdate(ctx_->md, data, size) != 1) throw Error("OpenSSL SHA-256 update failed");
}

std::string Sha256::hex_digest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx_->md, digest, &length) != 1) throw Error("OpenSSL SHA-256 finalization failed");
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

std::string sha256_hex(const void* data, size_t size) {
  Sha256 h;
  h.update(data, size);
  return h.hex_digest();
}

std::string sha256_hex(const std::string& bytes) { return sha256_hex(bytes.data(), bytes.size()); }

std::string sha256_file_hex(const std::string& path) {
  const int fd = open_regular_file(path);  // never a FIFO or a device
  std::FILE* f = ::fdopen(fd, "rb");
  if (!f) {
    ::close(fd);
    throw Error(path + ": cannot open: " + std::strerror(errno));
  }
  Sha256 h;
  std::vector<char> buffer(1 << 16);
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), f)) > 0) h.update(buffer.data(), n);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) throw Error(path + ": read error while hashing");
  return h.hex_digest();
}

void release_thread_hash_state() { OPENSSL_thread_stop(); }

}  // namespace qvl
