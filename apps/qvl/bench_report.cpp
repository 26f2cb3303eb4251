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

}  // namespace

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

nlohmann::json bench_json(const std::vector<BenchRow>& rows) {
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
    entry["runs"] = row.runs;
    out.push_back(entry);
  }
  return out;
}

std::string bench_table(const std::vector<BenchRow>& rows) {
  const std::vector<BenchMeasure> measures = reported_measures(rows);
  std::vector<std::vector<std::string>> cells = {{"mode", "dtype", "quant"}};
  for (const BenchMeasure& m : measures) cells[0].push_back(m.key);
  for (const BenchRow& row : rows) {
    std::vector<std::string> line = {row.mode, row.dtype, row.quant};
    for (const BenchMeasure& m : measures) {
      const std::vector<double> values = values_of(row, m.key);
      line.push_back(fmt::format("{:.{}f} ({:.{}f})", median(values), m.decimals, minimum(values), m.decimals));
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
