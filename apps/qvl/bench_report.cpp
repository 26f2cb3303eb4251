#include "bench_report.h"

#include <fmt/core.h>

#include <algorithm>

#include "qvl/error.h"

namespace qvl::app {
namespace {

std::vector<double> values_of(const BenchRow& row, const char* key) {
  std::vector<double> values;
  for (const nlohmann::json& run : row.runs) {
    if (!run.contains(key) || !run[key].is_number())
      throw Error(fmt::format("bench run {} {} {} reported no numeric '{}'", row.mode, row.dtype, row.quant, key));
    values.push_back(run[key].get<double>());
  }
  if (values.empty()) throw Error(fmt::format("bench row {} {} {} has no runs", row.mode, row.dtype, row.quant));
  return values;
}

double minimum(const std::vector<double>& values) { return *std::min_element(values.begin(), values.end()); }

// The measures the rows report: all the required ones, and the optional ones
// the first run of the first row has.
std::vector<BenchMeasure> reported_measures(const std::vector<BenchRow>& rows) {
  std::vector<BenchMeasure> out;
  for (const BenchMeasure& m : bench_measures())
    if (!m.optional || (!rows.empty() && !rows[0].runs.empty() && rows[0].runs[0].contains(m.key))) out.push_back(m);
  return out;
}

// The efficiencies in table order, with their column headings.
const std::vector<std::pair<const char*, const char*>>& efficiency_columns() {
  static const std::vector<std::pair<const char*, const char*>> columns = {
      {"decode", "decode_%bw"}, {"prefill", "prefill_%gemm"}, {"vision", "vision_%gemm"}};
  return columns;
}

double number_or(const nlohmann::json& object, const char* key, double fallback) {
  return object.contains(key) && object[key].is_number() ? object[key].get<double>() : fallback;
}

}  // namespace

nlohmann::json efficiency(const BenchRow& row, const nlohmann::json& machine) {
  nlohmann::json out = nlohmann::json::object();
  if (row.runs.empty() || !machine.contains("read_gb_s")) return out;
  const nlohmann::json& first = row.runs[0];  // the work is the same in every run
  const double bandwidth = machine["read_gb_s"].get<double>() * 1e9;
  const double gemm = machine["bf16_gflop_s"].get<double>() * 1e9;
  const double bytes = number_or(first, "decode_weight_bytes", 0);
  if (bytes > 0 && bandwidth > 0) out["decode"] = bytes * median(values_of(row, "decode_tok_s")) / bandwidth;
  const double prefill = number_or(first, "prefill_flops", 0), tokens = number_or(first, "prompt_tokens", 0);
  // --quant int8 prefills with the int8 GEMM (tensor/linear.h), so its ceiling is that one's.
  const double prefill_ceiling =
      row.quant == "int8" && machine.contains("int8_gop_s") ? machine["int8_gop_s"].get<double>() * 1e9 : gemm;
  if (prefill > 0 && tokens > 0 && prefill_ceiling > 0)
    out["prefill"] = prefill / tokens * median(values_of(row, "prefill_tok_s")) / prefill_ceiling;
  const double vision = number_or(first, "vision_flops", 0), vision_s = median(values_of(row, "vision_s"));
  // int8 and int4 run the vision blocks' linears and the mergers' first
  // linears (~82 % of its FLOPs) through the int8 GEMM too; attention and the
  // mergers' second linears stay bf16, so this ceiling is a little high for them.
  const double vision_ceiling =
      row.quant != "none" && machine.contains("int8_gop_s") ? machine["int8_gop_s"].get<double>() * 1e9 : gemm;
  if (vision > 0 && vision_s > 0 && vision_ceiling > 0) out["vision"] = vision / vision_s / vision_ceiling;
  return out;
}

const std::vector<BenchMeasure>& bench_measures() {
  static const std::vector<BenchMeasure> measures = {
      {"load_s", 3},        {"peak_rss_mb", 0},  {"vision_s", 3},
      {"prefill_tok_s", 1}, {"decode_tok_s", 2}, {"ttft_s", 3},
      {"batch_decode_tok_s", 2, true},
  };
  return measures;
}

double median(std::vector<double> values) {
  if (values.empty()) throw Error("median of no values");
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

nlohmann::json bench_json(const std::vector<BenchRow>& rows, const nlohmann::json& machine) {
  const std::vector<BenchMeasure> measures = reported_measures(rows);
  nlohmann::json out = nlohmann::json::array();
  for (const BenchRow& row : rows) {
    nlohmann::json entry = {{"mode", row.mode}, {"dtype", row.dtype}, {"quant", row.quant}};
    // The CPU tier the runs used (kernels/cpu.h), as they reported it.
    if (!row.runs.empty() && row.runs[0].contains("isa")) entry["isa"] = row.runs[0]["isa"];
    nlohmann::json minima = nlohmann::json::object();
    for (const BenchMeasure& m : measures) {
      const std::vector<double> values = values_of(row, m.key);
      entry[m.key] = median(values);
      minima[m.key] = minimum(values);
    }
    entry["min"] = minima;
    entry["efficiency"] = efficiency(row, machine);
    entry["machine"] = machine;
    entry["runs"] = row.runs;
    out.push_back(entry);
  }
  return out;
}

std::string bench_table(const std::vector<BenchRow>& rows, const nlohmann::json& machine) {
  const std::vector<BenchMeasure> measures = reported_measures(rows);
  const bool probed = machine.contains("read_gb_s");
  std::vector<std::vector<std::string>> cells = {{"mode", "dtype", "quant"}};
  for (const BenchMeasure& m : measures) cells[0].push_back(m.key);
  if (probed)
    for (const auto& column : efficiency_columns()) cells[0].push_back(column.second);
  for (const BenchRow& row : rows) {
    std::vector<std::string> line = {row.mode, row.dtype, row.quant};
    for (const BenchMeasure& m : measures) {
      const std::vector<double> values = values_of(row, m.key);
      line.push_back(fmt::format("{:.{}f} ({:.{}f})", median(values), m.decimals, minimum(values), m.decimals));
    }
    if (probed) {
      const nlohmann::json e = efficiency(row, machine);
      for (const auto& column : efficiency_columns())
        line.push_back(e.contains(column.first) ? fmt::format("{:.0f}%", 100 * e[column.first].get<double>()) : "-");
    }
    cells.push_back(line);
  }
  const size_t text_columns = 3;  // left-aligned; the measures are right-aligned
  std::vector<size_t> widths(cells[0].size(), 0);
  for (const auto& line : cells)
    for (size_t c = 0; c < line.size(); ++c) widths[c] = std::max(widths[c], line[c].size());
  std::string table;
  for (const auto& line : cells) {
    std::string text;
    for (size_t c = 0; c < line.size(); ++c) {
      if (c > 0) text += "  ";
      text += c < text_columns ? fmt::format("{:<{}}", line[c], widths[c]) : fmt::format("{:>{}}", line[c], widths[c]);
    }
    text.erase(text.find_last_not_of(' ') + 1);
    table += text + "\n";
  }
  return table;
}

}  // namespace qvl::app
