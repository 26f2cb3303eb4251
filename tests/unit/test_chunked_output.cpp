// io/chunked_output.h: the bytes arrive whole and in order, every write but
// the last is one whole chunk (what makes the page cache's folios large), and
// a failed write is reported with its errno.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "qvl/io/chunked_output.h"

using namespace qvl;

namespace {

std::string pattern(size_t n, unsigned seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = char((i * 131 + seed * 7) >> 3);
  return s;
}

}  // namespace

TEST_CASE("chunked output: pieces of any size arrive whole and in order") {
  const std::string path = "/tmp/qvl_test_" + std::to_string(::getpid()) + "_chunked";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  std::string expected;
  {
    ChunkedOutput out(fd);
    // Across and exactly onto chunk boundaries, and one piece of several chunks.
    for (size_t n : {size_t(1), size_t(4095), ChunkedOutput::kChunkBytes - 4096, size_t(0), size_t(4096),
                     2 * ChunkedOutput::kChunkBytes + 17, size_t(3)}) {
      const std::string piece = pattern(n, unsigned(expected.size()));
      REQUIRE(out.append(piece.data(), piece.size()) == 0);
      expected += piece;
      CHECK(out.size() == expected.size());
    }
    REQUIRE(out.flush() == 0);
    CHECK(out.flush() == 0);  // nothing left to write
  }
  ::close(fd);
  std::ifstream in(path, std::ios::binary);
  const std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ::unlink(path.c_str());
  CHECK(got.size() == expected.size());
  CHECK(got == expected);
}

TEST_CASE("chunked output: every write but the last is one whole chunk") {
  // A packet socket keeps each write() as one message, so the reader sees the writes' sizes.
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair) == 0);
  const size_t chunk = 4096;
  {
    ChunkedOutput out(pair[0], chunk);
    for (size_t n : {size_t(100), size_t(5000), size_t(1), size_t(12000), size_t(7)})
      REQUIRE(out.append(pattern(n, 1).data(), n) == 0);  // 17108 bytes: 4 chunks and 724
    REQUIRE(out.flush() == 0);
  }
  ::close(pair[0]);
  std::vector<size_t> sizes;
  std::vector<char> buffer(2 * chunk);
  for (ssize_t n; (n = ::recv(pair[1], buffer.data(), buffer.size(), 0)) > 0;) sizes.push_back(size_t(n));
  ::close(pair[1]);
  CHECK(sizes == std::vector<size_t>{chunk, chunk, chunk, chunk, 17108 - 4 * chunk});
}

TEST_CASE("chunked output: a full disk is reported, by the append that fills a chunk or by flush") {
  const int fd = ::open("/dev/full", O_WRONLY);
  if (fd < 0) return;  // no /dev/full in this container
  {
    ChunkedOutput out(fd, 4096);
    const std::string small = pattern(100, 2), large = pattern(5000, 3);
    CHECK(out.append(small.data(), small.size()) == 0);  // buffered: nothing written yet
    CHECK(out.append(large.data(), large.size()) == ENOSPC);
  }
  {
    ChunkedOutput out(fd, 4096);
    CHECK(out.append("abc", 3) == 0);
    CHECK(out.flush() == ENOSPC);
  }
  ::close(fd);
}
