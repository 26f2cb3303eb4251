// qvl bench's summary: for each configuration, the median and the minimum of
// every measure over its repetitions, as an aligned table or as JSON.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace qvl::app {

struct BenchRow {
  std::string mode, dtype, quant;
  std::vector<nlohmann::json> runs;  // one object per repetition, as the child printed it
};

// A numeric field of every run that the summary reports, in table order.
struct BenchMeasure {
  const char* key;  // e.g. "decode_tok_s"
  int decimals;     // shown in the table
  bool optional = false;  // reported only by some runs (e.g. batch_decode_tok_s with --batch)
};
const std::vector<BenchMeasure>& bench_measures();

double median(std::vector<double> values);

// A configuration's medians as fractions of the machine's ceilings
// (bench_machine.h), from the work each run reported (model/model_cost.h):
//   decode  = decoder weight bytes per token x tok/s / read bandwidth
//   prefill = prompt FLOPs / prefill time / bf16 GEMM throughput
//   vision  = vision FLOPs / vision time / bf16 GEMM throughput
// A field is left out when the machine was not probed or the run had no such
// work (vision of a text-only question).
nlohmann::json efficiency(const BenchRow& row, const nlohmann::json& machine);

// [{mode, dtype, quant, <measure>: median..., min: {<measure>: min...},
//   efficiency: {...}, machine: {...}, runs: [...]}]
nlohmann::json bench_json(const std::vector<BenchRow>& rows, const nlohmann::json& machine);

// One line per row; each measure shown as "median (min)", then the
// efficiencies in percent when the machine was probed.
std::string bench_table(const std::vector<BenchRow>& rows, const nlohmann::json& machine);

}  // namespace qvl::app
