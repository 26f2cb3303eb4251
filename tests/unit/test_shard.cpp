// qvl ocr --shard and --merge without the model: the --shard spec, the split
// (stable, disjoint, complete, by the path relative to the folder argument) and
// the merge plan (order, checks, superseded records, duplicate_of across shards).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "qvl/error.h"
#include "qvl/io/file_scan.h"
#include "qvl/io/ocr_merge.h"
#include "qvl/io/shard.h"

using namespace qvl;

namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string error_of(const std::string& spec, const EnvLookup& env = env_of({})) {
  try {
    parse_shard_spec(spec, env);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<ScannedFile> files_named(const std::vector<std::string>& relatives) {
  std::vector<ScannedFile> files;
  for (const std::string& r : relatives) files.push_back({"/archive/" + r, "", r});
  return files;
}

ShardRecord rec(const std::string& file, const std::string& sha, size_t source, int64_t page = 0,
                const std::string& duplicate_of = "", bool is_error = false) {
  ShardRecord r;
  r.file = file;
  r.sha256 = sha;
  r.source = source;
  r.page = page;
  r.duplicate_of = duplicate_of;
  r.is_error = is_error;
  return r;
}

// The files of the plan's records, in order, with their page after '#' when they have one.
std::vector<std::string> written(const MergePlan& plan, const std::vector<ShardRecord>& records) {
  std::vector<std::string> out;
  for (const auto& e : plan.order) {
    const ShardRecord& r = records[e.record];
    out.push_back(r.page ? r.file + "#" + std::to_string(r.page) : r.file);
  }
  return out;
}

}  // namespace

TEST_CASE("--shard K/N, slurm and slurm/N") {
  const ShardSpec a = parse_shard_spec("2/5", env_of({}));
  CHECK(a.index == 2);
  CHECK(a.count == 5);
  const ShardSpec s = parse_shard_spec("slurm", env_of({{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", "3"}}));
  CHECK(s.index == 1);
  CHECK(s.count == 3);
  // A re-submitted single task (--array=2) has SLURM_ARRAY_TASK_COUNT=1: slurm/N says N.
  const auto resubmitted = env_of({{"SLURM_ARRAY_TASK_ID", "2"}, {"SLURM_ARRAY_TASK_COUNT", "1"}});
  const ShardSpec r = parse_shard_spec("slurm/3", resubmitted);
  CHECK(r.index == 2);
  CHECK(r.count == 3);
  CHECK(error_of("slurm", resubmitted).find("--shard slurm/N") != std::string::npos);

  CHECK(error_of("3/3").find("0 to 2") != std::string::npos);
  CHECK(error_of("0/0").find("number of shards") != std::string::npos);
  for (const char* bad : {"", "1", "1/", "/2", "-1/3", "1/-3", "a/b", " 1/3", "1/3 ", "1/2/3", "slurmx", "slurm/"})
    CHECK_MESSAGE(!error_of(bad).empty(), bad);
  CHECK(error_of("slurm").find("SLURM_ARRAY_TASK_ID is not set") != std::string::npos);
  CHECK(error_of("slurm", env_of({{"SLURM_ARRAY_TASK_ID", "x"}})).find("not a number") != std::string::npos);
  CHECK(error_of("slurm", env_of({{"SLURM_ARRAY_TASK_ID", "0"}})).find("SLURM_ARRAY_TASK_COUNT is not set") !=
        std::string::npos);
  CHECK(error_of("1/1000001").find("number of shards") != std::string::npos);
  const std::string no_tasks =
      error_of("slurm", env_of({{"SLURM_ARRAY_TASK_ID", "0"}, {"SLURM_ARRAY_TASK_COUNT", "0"}}));
  CHECK(no_tasks.find("SLURM_ARRAY_TASK_COUNT=0 is not a valid task count") != std::string::npos);
  CHECK(no_tasks.find("--array") == std::string::npos);  // no advice to submit --array=0--1
}

TEST_CASE("a file's shard is SHA-256 of its relative path, the same on every machine") {
  // Independently: printf %s a.png | sha256sum  ->  7f071235805fbf58...
  CHECK(shard_hash("a.png") == 0x7f071235805fbf58ULL);
  CHECK(shard_hash("sub/b.png") == 0x75e5a71e997df603ULL);
  CHECK(shard_of("a.png", 3) == 0x7f071235805fbf58ULL % 3);
  CHECK(shard_of("a.png", 1) == 0);
}

TEST_CASE("shards are disjoint, cover every file, keep the order and do not move when files are added") {
  std::vector<std::string> names;
  for (int i = 0; i < 200; ++i) names.push_back("dir" + std::to_string(i % 7) + "/page-" + std::to_string(i) + ".png");
  const auto all = files_named(names);
  const int64_t n = 4;
  std::map<std::string, int64_t> shard_of_file;
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < all.size(); ++i) position[all[i].path] = i;
  size_t total = 0;
  for (int64_t k = 0; k < n; ++k) {
    const auto part = files_in_shard(all, {k, n});
    CHECK(part.size() > 20);  // 200 files in 4 shards: a hash that splits at all
    total += part.size();
    size_t next = 0;
    for (const auto& f : part) {
      CHECK(shard_of_file.emplace(f.path, k).second);  // in no other shard
      CHECK(position[f.path] >= next);                 // the listing's order kept
      next = position[f.path] + 1;
    }
  }
  CHECK(total == all.size());

  std::vector<std::string> more = names;
  for (int i = 200; i < 260; ++i) more.push_back("new/page-" + std::to_string(i) + ".png");
  for (int64_t k = 0; k < n; ++k)
    for (const auto& f : files_in_shard(files_named(more), {k, n}))
      if (shard_of_file.count(f.path)) CHECK(shard_of_file[f.path] == k);
}

TEST_CASE("the split uses the path relative to the folder argument") {
  char tmpl[] = "/tmp/qvl-shard-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string root = tmpl;
  REQUIRE(::mkdir((root + "/sub").c_str(), 0755) == 0);
  for (const char* rel : {"a.png", "sub/b.png"}) std::fclose(std::fopen((root + "/" + rel).c_str(), "wb"));
  ScanOptions scan;
  scan.recursive = true;
  for (const std::string& arg : {root, root + "/"}) {
    const auto files = expand_inputs({arg, root + "/a.png"}, scan);
    REQUIRE(files.size() == 3);
    CHECK(files[0].relative == "a.png");
    CHECK(files[1].relative == "sub/b.png");
    CHECK(files[2].relative == root + "/a.png");  // a file argument is its own key
  }
  std::system(("rm -rf '" + root + "'").c_str());
}

TEST_CASE("merge: the inputs' order, pages in order, each file from its shard") {
  const std::vector<ShardRecord> records = {
      rec("c.png", "sc", 0), rec("a.pdf", "sa", 0, 2), rec("a.pdf", "sa", 0, 1),
      rec("b.png", "sb", 1), rec("d.png", "", 1, 0, "", true),
  };
  const MergePlan plan = plan_merge({"a.pdf", "b.png", "c.png", "d.png"}, records);
  CHECK(plan.complete());
  CHECK(written(plan, records) == std::vector<std::string>{"a.pdf#1", "a.pdf#2", "b.png", "c.png", "d.png"});
  CHECK(plan.duplicates_set == 0);
  CHECK(plan.superseded == 0);
}

TEST_CASE("merge: missing inputs, files in two shards, foreign files and page gaps are found") {
  const std::vector<ShardRecord> records = {
      rec("a.png", "sa", 0), rec("b.png", "sb", 0), rec("b.png", "sb", 1),
      rec("x.png", "sx", 1), rec("p.pdf", "sp", 1, 1), rec("p.pdf", "sp", 1, 3),
  };
  const MergePlan plan = plan_merge({"a.png", "b.png", "c.png", "p.pdf"}, records);
  CHECK(!plan.complete());
  CHECK(plan.missing == std::vector<std::string>{"c.png"});
  REQUIRE(plan.overlapping.size() == 1);
  CHECK(plan.overlapping[0].file == "b.png");
  CHECK(plan.overlapping[0].first_source == 0);
  CHECK(plan.overlapping[0].second_source == 1);
  CHECK(plan.unexpected == std::vector<std::string>{"x.png"});
  CHECK(plan.page_gaps == std::vector<std::string>{"p.pdf: page 2 of 3 missing"});
  CHECK(plan_merge({"a.png"}, {rec("a.png", "s", 0)}).complete());
}

TEST_CASE("merge: a file missing its last pages is found by the page count its records give") {
  auto page = [](const std::string& file, int64_t n, int64_t pages) {
    ShardRecord r = rec(file, "s" + file, 0, n);
    r.pages = pages;
    return r;
  };
  // t.tif lost its page 2 of 2 (a killed run); d.pdf has pages 2 and 5 of 6; old.pdf's records are
  // from a qvl that wrote no "pages" (read as before: its highest page is the count).
  const std::vector<ShardRecord> records = {page("t.tif", 1, 2), page("d.pdf", 2, 6), page("d.pdf", 5, 6),
                                            page("old.pdf", 1, 0), page("old.pdf", 2, 0), page("ok.tif", 1, 2),
                                            page("ok.tif", 2, 2)};
  const MergePlan plan = plan_merge({"t.tif", "d.pdf", "old.pdf", "ok.tif"}, records);
  CHECK(!plan.complete());
  CHECK(plan.page_gaps == std::vector<std::string>{"t.tif: page 2 of 2 missing", "d.pdf: pages 1, 3-4, 6 of 6 missing"});
  // A count that no page reaches is not walked page by page.
  CHECK(plan_merge({"big.pdf"}, {page("big.pdf", 1, int64_t(1) << 60)}).page_gaps ==
        std::vector<std::string>{"big.pdf: pages 2-1152921504606846976 of 1152921504606846976 missing"});
}

TEST_CASE("merge: after --resume, a changed file's last records win") {
  // a.png changed between two runs of its shard; b.pdf's page 2 was written twice.
  const std::vector<ShardRecord> records = {
      rec("a.png", "old", 0), rec("b.pdf", "sb", 0, 1), rec("b.pdf", "sb", 0, 2),
      rec("b.pdf", "sb", 0, 2), rec("a.png", "new", 0),
  };
  const MergePlan plan = plan_merge({"a.png", "b.pdf"}, records);
  CHECK(plan.complete());
  REQUIRE(plan.order.size() == 3);
  CHECK(plan.order[0].record == 4);
  CHECK(plan.order[1].record == 1);
  CHECK(plan.order[2].record == 3);
  CHECK(plan.superseded == 2);
}

TEST_CASE("merge: identical files in different shards get duplicate_of as one run gives it") {
  // a and c have the same bytes, in shards 1 and 0; shard 0 also holds e, a copy of c.
  const std::vector<ShardRecord> records = {
      rec("c.png", "same", 0), rec("e.png", "same", 0, 0, "c.png"), rec("f.png", "same", 0, 0, "", true),
      rec("a.png", "same", 1), rec("b.png", "other", 1),
  };
  const MergePlan plan = plan_merge({"a.png", "b.png", "c.png", "e.png", "f.png"}, records);
  CHECK(plan.complete());
  REQUIRE(plan.order.size() == 5);
  CHECK(!plan.order[0].rewrite);  // a.png: the first, computed
  CHECK(!plan.order[1].rewrite);  // b.png: other bytes
  CHECK(plan.order[2].rewrite);   // c.png: a copy of a.png
  CHECK(plan.order[2].duplicate_of == "a.png");
  CHECK(plan.order[3].rewrite);  // e.png: said c.png, one run says a.png
  CHECK(plan.order[3].duplicate_of == "a.png");
  CHECK(!plan.order[4].rewrite);  // an error record is never a duplicate
  CHECK(plan.duplicates_set == 2);

  // The first in merged order loses a duplicate_of that its shard gave it.
  const std::vector<ShardRecord> swapped = {rec("a.png", "same", 1, 0, "z.png"), rec("z.png", "same", 1)};
  const MergePlan p2 = plan_merge({"a.png", "z.png"}, swapped);
  CHECK(p2.order[0].rewrite);
  CHECK(p2.order[0].duplicate_of.empty());
  CHECK(p2.order[1].duplicate_of == "a.png");
  // Pages: the same bytes at another page are not the same image.
  const std::vector<ShardRecord> pages = {rec("p.pdf", "s", 0, 1), rec("p.pdf", "s", 0, 2)};
  CHECK(plan_merge({"p.pdf"}, pages).duplicates_set == 0);
}
