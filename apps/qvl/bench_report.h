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

// [{mode, dtype, quant, <measure>: median..., min: {<measure>: min...}, runs: [...]}]
nlohmann::json bench_json(const std::vector<BenchRow>& rows);

// One line per row; each measure shown as "median (min)".
std::string bench_table(const std::vector<BenchRow>& rows);

}  // namespace qvl::app
