#include "bench_machine.h"

#include <fmt/core.h>

#include <utility>
#include <vector>

#include "qvl/error.h"
#include "qvl/io/mapped_file.h"
#include "qvl/io/safetensors.h"

#include "qvl/kernels/cpu.h"
#include "qvl/kernels/machine_probe.h"
#include "qvl/kernels/parallel.h"
#include "qvl/tensor/gemm_probe.h"

namespace qvl::app {

nlohmann::json machine_json(bool probe, const std::string& model_dir) {
  nlohmann::json m = {
      {"cpu", kernels::cpu_model_name()},
      {"isa", kernels::isa_name(kernels::active_isa())},
      {"threads", kernels::max_threads()},
  };
  if (!probe) return m;
  const kernels::BandwidthProbe bw = kernels::measure_read_bandwidth();
  const kernels::ThroughputProbe bf16 = tensor::measure_bf16_gemm();
  const kernels::ThroughputProbe int8 = kernels::measure_int8_gemm();
  m["read_gb_s"] = bw.gb_per_s;
  m["read_buffer_mb"] = bw.bytes >> 20;
  m["bf16_gflop_s"] = bf16.gops_per_s;
  m["bf16_gemm_shape"] = fmt::format("{}x{} by {}x{}", bf16.batch, bf16.cols, bf16.cols, bf16.rows);
  m["int8_gop_s"] = int8.gops_per_s;
  m["int8_shape"] = fmt::format("gemm_int8 {}x{} by {}x{}", int8.batch, int8.cols, int8.cols, int8.rows);
  // The shards the checkpoint is made of (its index, or model.safetensors). A
  // checkpoint that does not open is left to the runs to report.
  std::vector<std::pair<std::string, size_t>> shards;  // path, bytes
  try {
    const Checkpoint checkpoint(model_dir);
    for (const auto& file : checkpoint.files())
      shards.emplace_back(file->mapping().path(), file->mapping().size());
  } catch (const Error&) {
    return m;
  }
  double seconds = 0, bytes = 0;
  for (const auto& [path, size] : shards) {
    const double s = cached_mapping_cpu_seconds(path);
    if (s < 0) return m;  // a kernel without MADV_POPULATE_READ: not measured
    seconds += s;
    bytes += double(size);
  }
  if (bytes > 0) m["checkpoint_map_s_per_gb"] = seconds / (bytes / 1e9);
  return m;
}

std::string machine_line(const nlohmann::json& m) {
  std::string line = fmt::format("{}, {}, {} thread{}", m.value("cpu", std::string("unknown")),
                                 m.value("isa", std::string("?")), m.value("threads", 0),
                                 m.value("threads", 0) == 1 ? "" : "s");
  if (!m.contains("read_gb_s")) return line + " (not probed)";
  line += fmt::format(": read {:.1f} GB/s, bf16 GEMM {:.0f} GFLOP/s, int8 GEMM {:.0f} GOP/s",
                      m["read_gb_s"].get<double>(), m["bf16_gflop_s"].get<double>(), m["int8_gop_s"].get<double>());
  if (m.contains("checkpoint_map_s_per_gb"))
    line += fmt::format(", checkpoint maps in {:.3f} CPU s/GB", m["checkpoint_map_s_per_gb"].get<double>());
  return line;
}

}  // namespace qvl::app
