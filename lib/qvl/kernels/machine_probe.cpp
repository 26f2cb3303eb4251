#include "qvl/kernels/machine_probe.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <vector>

#include "qvl/error.h"
#include "qvl/kernels/int8_gemm.h"
#include "qvl/kernels/quant.h"

namespace qvl::kernels {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct FreeAligned {
  void operator()(void* p) const { std::free(p); }
};

std::string trimmed(std::string s) {
  const size_t begin = s.find_first_not_of(" \t");
  const size_t end = s.find_last_not_of(" \t\r\n");
  return begin == std::string::npos ? "" : s.substr(begin, end - begin + 1);
}

// Sums the 64-bit words of [begin, end) in eight independent lanes, so the
// loads are not serialised behind one addition chain; the compiler turns the
// lanes into vector loads. Returned so the reads cannot be optimised away.
uint64_t sum_words(const uint64_t* begin, const uint64_t* end) {
  uint64_t lane[8] = {};
  for (const uint64_t* p = begin; p + 8 <= end; p += 8)
    for (int k = 0; k < 8; ++k) lane[k] += p[k];
  uint64_t total = 0;
  for (uint64_t v : lane) total += v;
  return total;
}

}  // namespace

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name, family, model, part;
  // The first processor's fields only: a blank line ends its block.
  while (std::getline(in, line) && !trimmed(line).empty()) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trimmed(line.substr(0, colon)), value = trimmed(line.substr(colon + 1));
    if (key == "model name") name = value;
    if (key == "cpu family") family = value;
    if (key == "model") model = value;
    if (key == "CPU part") part = value;
  }
  // VMs often show a bare "AMD EPYC": the family and model numbers still say
  // which generation it is (e.g. family 25 = Zen 3/4, 26 = Zen 5).
  if (!name.empty() && !family.empty() && !model.empty())
    return name + " (family " + family + ", model " + model + ")";
  if (!name.empty()) return name;
  if (!part.empty()) return "CPU part " + part;
  return "unknown";
}

BandwidthProbe measure_read_bandwidth(int64_t bytes, int passes) {
  if (bytes < 4096 || passes < 1) throw Error("measure_read_bandwidth: the buffer and the passes must be positive");
  const int64_t words = bytes / int64_t(sizeof(uint64_t)) / 8 * 8;
  std::unique_ptr<uint64_t, FreeAligned> buffer(
      static_cast<uint64_t*>(std::aligned_alloc(4096, size_t((words * 8 + 4095) / 4096 * 4096))));
  if (!buffer) throw Error("measure_read_bandwidth: cannot allocate " + std::to_string(bytes) + " bytes");
  uint64_t* data = buffer.get();
  // Each thread writes (and so faults in, on its own NUMA node) the part it reads.
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t begin = words * t / threads / 8 * 8, end = t + 1 == threads ? words : words * (t + 1) / threads / 8 * 8;
    for (int64_t i = begin; i < end; ++i) data[i] = uint64_t(i);
  }
  BandwidthProbe probe;
  probe.bytes = words * int64_t(sizeof(uint64_t));
  probe.passes = passes;
  uint64_t checksum = 0;
  double best = 1e30;
  for (int pass = 0; pass < passes; ++pass) {
    const double t0 = now_s();
#pragma omp parallel reduction(+ : checksum)
    {
      const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t begin = words * t / threads / 8 * 8,
                    end = t + 1 == threads ? words : words * (t + 1) / threads / 8 * 8;
      checksum += sum_words(data + begin, data + end);
    }
    best = std::min(best, now_s() - t0);
  }
  // words * (words - 1) / 2 is what the buffer sums to: a wrong sum would mean
  // the passes read something else than they claim.
  const uint64_t expected = uint64_t(words) * uint64_t(words - 1) / 2 * uint64_t(passes);
  if (checksum != expected) throw Error("measure_read_bandwidth: the reads summed to the wrong value");
  probe.gb_per_s = double(probe.bytes) / best / 1e9;
  return probe;
}

ThroughputProbe measure_int8_gemm(int64_t rows, int64_t cols, int64_t batch, double min_seconds) {
  if (rows < 1 || cols < 1 || batch < 1) throw Error("measure_int8_gemm: rows, columns and batch must be positive");
  QuantizedMatrix w(rows, cols, 128);
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> value(-127, 127);
  const Int8Matrix& m = w.view();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) w.weights()[r * m.padded_cols + c] = int8_t(value(rng));
  std::fill(w.scales(), w.scales() + rows * m.groups(), 1.0f / 127);
  std::vector<float> x(size_t(batch * cols)), y(size_t(batch * rows));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& v : x) v = uniform(rng);

  auto product = [&] { gemm_int8(m, x.data(), Storage::F32, cols, batch, y.data(), Storage::F32, rows); };
  product();  // warm-up: page faults, thread start
  ThroughputProbe probe;
  probe.rows = rows;
  probe.cols = cols;
  probe.batch = batch;
  double best = 1e30;
  const double start = now_s();
  while (probe.calls < 3 || now_s() - start < min_seconds) {
    const double t0 = now_s();
    product();
    best = std::min(best, now_s() - t0);
    ++probe.calls;
  }
  probe.gops_per_s = 2.0 * double(rows) * double(cols) * double(batch) / best / 1e9;
  return probe;
}

}  // namespace qvl::kernels
