#include "qvl/io/ocr_merge.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

namespace qvl {
namespace {

struct FileRecords {
  size_t source = 0;
  std::vector<size_t> records;  // in the order the shard output holds them
};

// The current records of one file: those with the sha256 of its last record,
// the last one for each page, in page order.
std::vector<size_t> current_records(const FileRecords& f, const std::vector<ShardRecord>& all, size_t& superseded) {
  const std::string& current_sha = all[f.records.back()].sha256;
  std::map<int64_t, size_t> by_page;
  for (size_t i : f.records)
    if (all[i].sha256 == current_sha) by_page[all[i].page] = i;  // a later record of a page wins
  superseded += f.records.size() - by_page.size();
  std::vector<size_t> kept;
  for (const auto& [page, i] : by_page) kept.push_back(i);
  return kept;
}

// Pages 1..n, or none at all (a record without "page" sorts first and is not
// a page). n is the largest "pages" the records give, or without it the
// highest page there is.
bool pages_have_gaps(const std::vector<size_t>& kept, const std::vector<ShardRecord>& all, std::string& described) {
  std::set<int64_t> pages;
  int64_t count = 0;
  for (size_t i : kept) {
    if (all[i].page <= 0) continue;
    pages.insert(all[i].page);
    count = std::max({count, all[i].pages, all[i].page});
  }
  std::vector<std::pair<int64_t, int64_t>> gaps;  // first and last missing page of each run
  int64_t next = 1;
  for (int64_t page : pages) {
    if (page > next) gaps.push_back({next, page - 1});
    next = page + 1;
  }
  if (next <= count) gaps.push_back({next, count});
  if (gaps.empty()) return false;
  const bool one = gaps.size() == 1 && gaps[0].first == gaps[0].second;
  described = all[kept.front()].file + (one ? ": page" : ": pages");
  for (size_t j = 0; j < gaps.size(); ++j) {
    described += (j ? ", " : " ") + std::to_string(gaps[j].first);
    if (gaps[j].second > gaps[j].first) described += "-" + std::to_string(gaps[j].second);
  }
  described += " of " + std::to_string(count) + " missing";
  return true;
}

}  // namespace

MergePlan plan_merge(const std::vector<std::string>& inputs, const std::vector<ShardRecord>& records) {
  MergePlan plan;
  // Each file's records, from the first shard output that has it.
  std::unordered_map<std::string, FileRecords> by_file;
  std::vector<std::string> file_order;  // first appearance, for reporting unexpected files in a stable order
  std::set<std::string> told_overlap;
  for (size_t i = 0; i < records.size(); ++i) {
    const ShardRecord& r = records[i];
    auto [it, inserted] = by_file.try_emplace(r.file);
    if (inserted) {
      it->second.source = r.source;
      file_order.push_back(r.file);
    } else if (it->second.source != r.source) {
      if (told_overlap.insert(r.file).second) plan.overlapping.push_back({r.file, it->second.source, r.source});
      continue;
    }
    it->second.records.push_back(i);
  }

  std::set<std::string> used;
  for (const std::string& input : inputs) {
    auto it = by_file.find(input);
    if (it == by_file.end()) {
      plan.missing.push_back(input);
      continue;
    }
    if (!used.insert(input).second) continue;  // the caller's list should hold each path once
    const std::vector<size_t> kept = current_records(it->second, records, plan.superseded);
    std::string described;
    if (pages_have_gaps(kept, records, described)) plan.page_gaps.push_back(described);
    for (size_t i : kept) plan.order.push_back({i, false, ""});
  }
  for (const std::string& file : file_order)
    if (!used.count(file)) plan.unexpected.push_back(file);

  // "duplicate_of" as one run over everything would have set it.
  std::map<std::pair<std::string, int64_t>, std::string> first_with;  // (sha256, page) -> file
  for (MergePlan::Entry& e : plan.order) {
    const ShardRecord& r = records[e.record];
    if (r.is_error || r.sha256.empty()) continue;
    auto [it, first] = first_with.try_emplace({r.sha256, r.page}, r.file);
    const std::string want = first ? "" : it->second;
    if (want != r.duplicate_of) {
      e.rewrite = true;
      e.duplicate_of = want;
      plan.duplicates_set += 1;
    }
  }
  return plan;
}

}  // namespace qvl
