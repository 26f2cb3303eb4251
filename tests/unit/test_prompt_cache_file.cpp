// The prompt cache's files (io/prompt_entry.h, io/prompt_cache_dir.h) and its
// choice of prefix (text/prompt_prefix.h): an entry reads back as written,
// any damaged byte or cut is refused, keys name different files, and the
// folder keeps its size bound by evicting the least recently used entries.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "qvl/error.h"
#include "qvl/io/prompt_cache_dir.h"
#include "qvl/io/prompt_entry.h"
#include "qvl/text/prompt_prefix.h"

namespace {

struct Scratch {
  std::string path;
  Scratch() {
    const char* tmp = std::getenv("TMPDIR");
    path = std::string(tmp && *tmp ? tmp : "/tmp") + "/qvl-prompt-cache-test-XXXXXX";
    REQUIRE(::mkdtemp(path.data()) != nullptr);
  }
  ~Scratch() { std::system(("rm -rf '" + path + "'").c_str()); }
};

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_all(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// A small entry: 2 layers, 3 kv heads, 5 tokens, head dim 4, bf16-sized values.
qvl::PromptEntryHeader small_header() {
  qvl::PromptEntryHeader h;
  h.key = "qvl prompt cache test\nimage 1x4x6 abc\n";
  h.tokens = {151644, 8948, 198, 151652, 151655, 151655, 151653};
  h.tokens.resize(5);
  h.next_position = 4;
  h.layout = {2, 3, 4, 2};
  return h;
}

std::vector<uint8_t> payload_for(const qvl::PromptEntryHeader& h, uint32_t seed) {
  std::vector<uint8_t> bytes(h.payload_bytes());
  std::mt19937 rng(seed);
  for (auto& b : bytes) b = uint8_t(rng());
  return bytes;
}

// The payload in uneven pieces, as the writer gets them from the KV cache.
void write_entry(const std::string& path, const qvl::PromptEntryHeader& h, const std::vector<uint8_t>& payload) {
  std::vector<qvl::ByteRange> pieces;
  for (size_t at = 0, step = 7; at < payload.size(); at += step, step = step * 3 % 61 + 1)
    pieces.push_back({payload.data() + at, std::min(step, payload.size() - at)});
  qvl::write_prompt_entry(path, h, pieces);
}

}  // namespace

TEST_CASE("prompt entry: reads back exactly what was written") {
  Scratch s;
  const qvl::PromptEntryHeader h = small_header();
  const std::vector<uint8_t> payload = payload_for(h, 1);
  const std::string path = s.path + "/e.qkv";
  write_entry(path, h, payload);
  const qvl::PromptEntryFile entry(path);
  CHECK(entry.header().key == h.key);
  CHECK(entry.header().tokens == h.tokens);
  CHECK(entry.header().next_position == 4);
  CHECK(entry.header().layout == h.layout);
  CHECK(reinterpret_cast<uintptr_t>(entry.payload()) % 64 == 0);
  CHECK(std::memcmp(entry.payload(), payload.data(), payload.size()) == 0);
  // Layer 1's values are the fourth block of [3 heads x 5 tokens x 4] 2-byte values.
  CHECK(entry.block(1, 1) - entry.payload() == 3 * 120);
}

TEST_CASE("prompt entry: every damaged byte, a cut and a wrong payload size are refused") {
  Scratch s;
  const qvl::PromptEntryHeader h = small_header();
  const std::string path = s.path + "/e.qkv";
  write_entry(path, h, payload_for(h, 2));
  const std::vector<uint8_t> good = read_all(path);
  const std::string damaged = s.path + "/damaged.qkv";
  for (size_t i = 0; i < good.size(); ++i) {
    std::vector<uint8_t> bad = good;
    bad[i] ^= uint8_t(1u << (i % 8));
    write_all(damaged, bad);
    CHECK_THROWS_AS(qvl::PromptEntryFile{damaged}, qvl::Error);
  }
  for (size_t keep : {size_t(0), size_t(20), good.size() / 2, good.size() - 1}) {
    write_all(damaged, std::vector<uint8_t>(good.begin(), good.begin() + std::ptrdiff_t(keep)));
    CHECK_THROWS_AS(qvl::PromptEntryFile{damaged}, qvl::Error);
  }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  write_all(damaged, longer);
  CHECK_THROWS_WITH_AS(qvl::PromptEntryFile{damaged}, doctest::Contains("bytes, its header says"), qvl::Error);
  std::vector<uint8_t> short_payload = payload_for(h, 3);
  short_payload.pop_back();
  CHECK_THROWS_AS(qvl::write_prompt_entry(damaged, h, {{short_payload.data(), short_payload.size()}}), qvl::Error);
  CHECK_NOTHROW(qvl::PromptEntryFile{path});  // the original is still whole
}

TEST_CASE("prompt entry: a header that lies about the payload is refused even with a right checksum") {
  Scratch s;
  const qvl::PromptEntryHeader h = small_header();
  const std::string path = s.path + "/e.qkv";
  write_entry(path, h, payload_for(h, 4));
  const std::vector<uint8_t> good = read_all(path);
  // The layout's four fields follow the key, the tokens and the next position.
  const size_t layout_at = 32 + 8 + h.key.size() + 8 + 4 * h.tokens.size() + 8;
  for (auto [field, value] : {std::pair<int, int64_t>{0, 3}, {1, int64_t(1) << 40}, {2, -4}, {3, 3}, {0, 1}}) {
    CAPTURE(field);
    std::vector<uint8_t> bad = good;
    std::memcpy(bad.data() + layout_at + 8 * size_t(field), &value, 8);
    const uint64_t sum = qvl::checksum64(bad.data() + 16, bad.size() - 16);
    std::memcpy(bad.data() + 8, &sum, 8);
    write_all(path, bad);
    CHECK_THROWS_WITH_AS(qvl::PromptEntryFile{path}, doctest::Contains("does not match its header"), qvl::Error);
  }
}

TEST_CASE("checksum64: pieces equal the whole, and one changed word or length changes it") {
  std::vector<uint8_t> data(1000);
  std::mt19937 rng(7);
  for (auto& b : data) b = uint8_t(rng());
  const uint64_t whole = qvl::checksum64(data.data(), data.size());
  qvl::Checksum64 pieces;
  for (size_t at = 0, step = 1; at < data.size(); at += step, step = step % 45 + 1)
    pieces.update(data.data() + at, std::min(step, data.size() - at));
  CHECK(pieces.digest() == whole);
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] ^= 0x80;
    CHECK(qvl::checksum64(data.data(), data.size()) != whole);
    data[i] ^= 0x80;
  }
  CHECK(qvl::checksum64(data.data(), data.size() - 1) != whole);
  std::vector<uint8_t> zeros(64, 0);
  CHECK(qvl::checksum64(zeros.data(), 63) != qvl::checksum64(zeros.data(), 64));
}

TEST_CASE("prompt cache folder: one file per key, published whole") {
  Scratch s;
  const qvl::PromptCacheDir dir(s.path + "/a/prompts", 1 << 20);
  const std::string p1 = dir.path_for("key one"), p2 = dir.path_for("key two");
  CHECK(p1 != p2);
  CHECK(p1 == dir.path_for("key one"));
  CHECK(p1.rfind(s.path + "/a/prompts/prompt-", 0) == 0);
  std::string error;
  // The folder is created; a failing writer leaves nothing behind, not even its temporary.
  CHECK_FALSE(dir.publish(p1, 100, [](const std::string& tmp) {
    write_all(tmp, {1, 2, 3});
    throw qvl::Error("disk full");
  }, &error));
  CHECK(error == "disk full");
  CHECK(::access(p1.c_str(), F_OK) != 0);
  CHECK(dir.total_bytes() == 0);
  CHECK(dir.publish(p1, 3, [](const std::string& tmp) { write_all(tmp, {1, 2, 3}); }, &error));
  CHECK(read_all(p1) == std::vector<uint8_t>{1, 2, 3});
  // Larger than the bound: not written at all.
  CHECK_FALSE(dir.publish(p2, 2 << 20, [](const std::string&) { FAIL("must not write"); }, &error));
  CHECK(error.find("larger than") != std::string::npos);
}

TEST_CASE("prompt cache folder: unwritable folder fails the publish, not the caller") {
  if (::geteuid() == 0) {  // root writes anywhere: make the folder a file instead
    Scratch s;
    write_all(s.path + "/file", {0});
    const qvl::PromptCacheDir dir(s.path + "/file/prompts", 1 << 20);
    std::string error;
    CHECK_FALSE(dir.publish(dir.path_for("k"), 3, [](const std::string& tmp) { write_all(tmp, {1}); }, &error));
    CHECK(error.find("cannot create") != std::string::npos);
    return;
  }
  Scratch s;
  ::chmod(s.path.c_str(), 0555);
  const qvl::PromptCacheDir dir(s.path, 1 << 20);
  std::string error;
  CHECK_FALSE(dir.publish(dir.path_for("k"), 3,
                          [](const std::string& tmp) {
                            std::ofstream out(tmp);
                            if (!out) throw qvl::Error("cannot create " + tmp);
                          },
                          &error));
  ::chmod(s.path.c_str(), 0755);
}

TEST_CASE("prompt cache folder: evicts the least recently used entries down to the bound") {
  Scratch s;
  const qvl::PromptCacheDir dir(s.path, 2500);  // room for two 1000-byte entries
  const std::vector<uint8_t> kb(1000, 7);
  std::string error;
  const std::string a = dir.path_for("a"), b = dir.path_for("b"), c = dir.path_for("c");
  REQUIRE(dir.publish(a, 1000, [&](const std::string& t) { write_all(t, kb); }, &error));
  REQUIRE(dir.publish(b, 1000, [&](const std::string& t) { write_all(t, kb); }, &error));
  // Make a older than b, then use a: b becomes the least recently used.
  const timespec old_times[2] = {{1000, 0}, {1000, 0}}, older_times[2] = {{500, 0}, {500, 0}};
  REQUIRE(::utimensat(AT_FDCWD, a.c_str(), older_times, 0) == 0);
  REQUIRE(::utimensat(AT_FDCWD, b.c_str(), old_times, 0) == 0);
  dir.touch(a);
  // A temporary of a writer that died long ago is removed; a fresh one is not (its writer may be running).
  const std::string stale = a + ".tmp-99999-0", fresh = b + ".tmp-99998-0";
  write_all(stale, kb);
  write_all(fresh, kb);
  REQUIRE(::utimensat(AT_FDCWD, stale.c_str(), older_times, 0) == 0);
  REQUIRE(dir.publish(c, 1000, [&](const std::string& t) { write_all(t, kb); }, &error));
  CHECK(::access(a.c_str(), F_OK) == 0);
  CHECK(::access(b.c_str(), F_OK) != 0);
  CHECK(::access(c.c_str(), F_OK) == 0);
  CHECK(::access(stale.c_str(), F_OK) != 0);
  CHECK(::access(fresh.c_str(), F_OK) == 0);
  CHECK(dir.total_bytes() == 2000);
  // The entry just written stays even when it alone fills the bound.
  const qvl::PromptCacheDir tight(s.path, 1000);
  CHECK(tight.evict(c) == 1);
  CHECK(::access(c.c_str(), F_OK) == 0);
  CHECK(tight.total_bytes() == 1000);
}

TEST_CASE("reusable prompt prefix: up to the last image's end, never the whole prompt") {
  const int32_t end = 151653;
  CHECK(qvl::reusable_prefix_length({}, end) == 0);
  CHECK(qvl::reusable_prefix_length({1, 2, 3}, end) == 0);                       // no image
  CHECK(qvl::reusable_prefix_length({1, 151652, 9, end, 5, 6}, end) == 4);
  CHECK(qvl::reusable_prefix_length({1, 151652, 9, end, 151652, 9, end, 5}, end) == 7);  // the last image
  CHECK(qvl::reusable_prefix_length({1, 151652, 9, end}, end) == 0);              // nothing would be left
}
