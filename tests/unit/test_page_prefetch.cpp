// io/page_prefetch.h and populate_pages: the pages of a mapping are read in
// without a signal, also when the file shrank after it was mapped.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "qvl/error.h"
#include "qvl/io/mapped_file.h"
#include "qvl/io/page_prefetch.h"
#include "test_support.h"

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
  if (test::under_qemu_user_mode()) {
    MESSAGE("skipped under QEMU's user mode: it does not populate pages, so it reports no EFAULT");
    return;
  }
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
  if (test::under_qemu_user_mode()) {
    MESSAGE("truncation part skipped under QEMU's user mode: it does not populate pages, so it reports no EFAULT");
    ::unlink(path.c_str());
    return;
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

TEST_CASE("a file's mapping asks for huge pages, so that pages read through it are cached in large folios") {
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  if (!thp || test::under_qemu_user_mode()) {
    MESSAGE("skipped: no transparent huge pages here, or QEMU's user mode, which does not pass the advice on");
    return;
  }
  const std::string path = write_file("huge_advice", kFileBytes);
  MappedFile file(path);
  // The mapping's entry in /proc/self/smaps starts "<begin>-<end> "; its
  // VmFlags line lists "hg" for MADV_HUGEPAGE.
  char begin[32];
  std::snprintf(begin, sizeof begin, "%lx-", static_cast<unsigned long>(reinterpret_cast<uintptr_t>(file.data())));
  std::ifstream smaps("/proc/self/smaps");
  std::string line, flags;
  bool inside = false;
  while (std::getline(smaps, line)) {
    if (line.rfind(begin, 0) == 0) inside = true;
    else if (inside && line.rfind("VmFlags:", 0) == 0) {
      flags = line;
      break;
    }
  }
  INFO("smaps flags of the mapping: " << flags);
  CHECK(inside);
  CHECK((" " + flags + " ").find(" hg ") != std::string::npos);
  ::unlink(path.c_str());
}

TEST_CASE("read_into copies a file's bytes without the mapping; outside the file or past a truncation is an error") {
  const std::string path = write_file("read_into", 100000);
  {  // distinct bytes, so that an offset error shows
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 100000; ++i) out.put(char(i * 7 + i / 256));
  }
  MappedFile file(path);
  std::string got(5000, '\0');
  file.read_into(12345, got.size(), got.data());
  CHECK(got == std::string(reinterpret_cast<const char*>(file.data()) + 12345, got.size()));
  CHECK_THROWS_WITH_AS(file.read_into(99000, 2000, got.data()), doctest::Contains("outside the file's 100000 bytes"),
                       Error);
  REQUIRE(::truncate(path.c_str(), 50000) == 0);
  CHECK_THROWS_WITH_AS(file.read_into(60000, 100, got.data()), doctest::Contains("ended early"), Error);
  ::unlink(path.c_str());
}
