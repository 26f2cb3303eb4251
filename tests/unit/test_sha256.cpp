// SHA-256 against the FIPS 180-2 example messages and the fixture digest that
// tests/data/FIXTURES.md quotes for the tiny model's chat template.
#include <doctest/doctest.h>

#include <string>

#include "qvl/error.h"
#include "qvl/io/mapped_file.h"
#include "qvl/io/sha256.h"
#include "test_support.h"

using namespace qvl;

TEST_CASE("sha256: FIPS 180-2 example messages") {
  CHECK(sha256_hex(std::string()) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex(std::string("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex(std::string("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1000000, 'a')) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256: pieces hash like the whole") {
  const std::string message(200000, 'a');
  for (size_t cut : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(65), size_t(123457)}) {
    Sha256 h;
    h.update(message.data(), cut);
    h.update(message.data() + cut, message.size() - cut);
    CHECK(h.hex_digest() == sha256_hex(message));
  }
}

TEST_CASE("sha256: a file, read in chunks, matches the digest FIXTURES.md gives") {
  const std::string path = test::data_path("tiny-qwen3-vl/chat_template.jinja");
  const std::string hex = sha256_file_hex(path);
  CHECK(hex.size() == 64);
  CHECK(hex.rfind("3636d0f0", 0) == 0);
  CHECK(hex.compare(hex.size() - 5, 5, "489e4") == 0);
  CHECK(hex == sha256_hex(read_text_file(path)));
}

TEST_CASE("sha256: a missing file throws naming it") {
  const std::string path = test::data_path("no-such-file.bin");
  try {
    sha256_file_hex(path);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find(path) != std::string::npos);
  }
}
