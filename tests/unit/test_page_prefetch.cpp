// io/page_prefetch.h and populate_pages: the pages of a mapping are read in
// without a signal, also when the file shrank after it was mapped.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>

#include "qvl/error.h"
#include "qvl/io/mapped_file.h"
#include "qvl/io/page_prefetch.h"

using namespace qvl;

namespace {

std::string write_file(const std::string& name, size_t bytes) {
  const std::string path = "/tmp/qvl_test_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream out(path, std::ios::binary);
  std::string chunk(1 << 16, '\x5a');
  for (size_t done = 0; done < bytes; done += chunk.size()) out.write(chunk.data(), std::streamsize(std::min(chunk.size(), bytes - done)));
  return path;
}

constexpr size_t kFileBytes = size_t(12) << 20;  // three prefetch pieces

}  // namespace

TEST_CASE("page prefetch: every byte of every range is populated, and reads the file's contents") {
  const std::string path = write_file("prefetch_whole", kFileBytes);
  MappedFile file(path);
  CHECK(populate_pages(file.data() + 1, 10) == 0);
  {
    PagePrefetcher prefetch({{file.data(), kFileBytes / 2}, {file.data() + kFileBytes / 2, kFileBytes / 2}});
    prefetch.wait();
    CHECK(prefetch.error() == 0);
    CHECK(prefetch.bytes_done() == kFileBytes);
  }
  CHECK(file.data()[kFileBytes - 1] == 0x5a);
  ::unlink(path.c_str());
}

TEST_CASE("page prefetch: a file truncated after mapping stops the prefetch with EFAULT, not SIGBUS") {
  const std::string path = write_file("prefetch_truncated", kFileBytes);
  MappedFile file(path);
  REQUIRE(::truncate(path.c_str(), 4096) == 0);  // the mapping still spans 12 MB
  // Reading past the new end would raise SIGBUS; populate_pages reports it instead.
  CHECK(populate_pages(file.data() + kFileBytes - 100, 100) == EFAULT);
  PagePrefetcher prefetch({{file.data(), kFileBytes}});
  prefetch.wait();
  CHECK(prefetch.error() == EFAULT);
  CHECK(prefetch.bytes_done() < kFileBytes);
  ::unlink(path.c_str());
}

TEST_CASE("page prefetch: stop() ends the thread without reading everything") {
  const std::string path = write_file("prefetch_stop", kFileBytes);
  MappedFile file(path);
  const size_t ranges = 20000;  // 240 GB of (repeated) ranges: seconds of work if stop() were ignored
  PagePrefetcher prefetch(std::vector<ByteRange>(ranges, ByteRange{file.data(), kFileBytes}));
  prefetch.stop();
  CHECK(prefetch.error() == 0);
  CHECK(prefetch.bytes_done() < ranges * kFileBytes / 10);
  ::unlink(path.c_str());
}

TEST_CASE("page prefetch: two threads share the pieces, every byte once; a truncated file stops both with EFAULT") {
  const std::string path = write_file("prefetch_two", kFileBytes);
  MappedFile file(path);
  {
    // Ranges of odd sizes, so that pieces do not line up with the 4 MB cut.
    const size_t a = kFileBytes / 3 + 1234;
    PagePrefetcher prefetch({{file.data(), a}, {file.data() + a, kFileBytes - a}}, PrefetchOptions{2, 0});
    CHECK(prefetch.threads() == 2);
    prefetch.wait();
    CHECK(prefetch.error() == 0);
    CHECK(prefetch.bytes_done() == kFileBytes);
  }
  {
    // More threads than pieces: only as many as there are pieces start.
    PagePrefetcher prefetch({{file.data(), 4096}}, PrefetchOptions{4, 0});
    CHECK(prefetch.threads() == 1);
    prefetch.wait();
    CHECK(prefetch.bytes_done() == 4096);
  }
  // The first piece lies past the new end; the 1000 after it (4 GB of one
  // mapped piece, ~20 ms to walk) are readable. The thread that claims the
  // first piece fails at once and must stop the other one, which would
  // otherwise go on through the readable ones.
  constexpr size_t kPiece = size_t(4) << 20;
  REQUIRE(::truncate(path.c_str(), off_t(kPiece)) == 0);
  std::vector<ByteRange> ranges{{file.data() + kPiece, kPiece}};
  ranges.insert(ranges.end(), 1000, ByteRange{file.data(), kPiece});
  PagePrefetcher prefetch(ranges, PrefetchOptions{2, 0});
  prefetch.wait();
  CHECK(prefetch.error() == EFAULT);
  CHECK(prefetch.bytes_done() < 100 * kPiece);
  ::unlink(path.c_str());
}

TEST_CASE("cached_mapping_cpu_seconds: a file's mapping cost is measured, a missing file is an error") {
  const std::string path = write_file("mapping_cost", kFileBytes);
  const double seconds = cached_mapping_cpu_seconds(path);
  // Negative only on a kernel without MADV_POPULATE_READ; 12 MB never takes a second.
  CHECK(seconds < 1.0);
  if (seconds < 0) MESSAGE("this kernel lacks MADV_POPULATE_READ");
  ::unlink(path.c_str());
  CHECK_THROWS_AS(cached_mapping_cpu_seconds(path), Error);
}
