#include "qvl/io/shard.h"

#include <cstdlib>
#include <string>
#include <utility>

#include "qvl/error.h"
#include "qvl/io/sha256.h"

namespace qvl {
namespace {

// At most this many shards: far beyond any cluster, small enough that a typo
// (an extra digit) is caught.
constexpr int64_t kMaxShards = 1000000;

// Digits only, no sign, no spaces, no overflow; -1 when not a number.
int64_t parse_count(const std::string& s) {
  if (s.empty() || s.size() > 9) return -1;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

ShardSpec checked(int64_t index, int64_t count, const std::string& text) {
  if (count < 1 || count > kMaxShards)
    throw Error("--shard " + text + ": the number of shards must be 1 to " + std::to_string(kMaxShards));
  if (index < 0 || index >= count)
    throw Error("--shard " + text + ": the shard number must be 0 to " + std::to_string(count - 1) +
                " (K/N counts K from 0)");
  return {index, count};
}

}  // namespace

ShardSpec parse_shard_spec(const std::string& text, const EnvLookup& env_lookup) {
  const EnvLookup env = env_lookup ? env_lookup : EnvLookup([](const char* name) { return std::getenv(name); });
  const size_t slash = text.find('/');
  const std::string first = text.substr(0, slash);
  const std::string second = slash == std::string::npos ? "" : text.substr(slash + 1);
  if (first != "slurm") {
    const int64_t k = parse_count(first), n = parse_count(second);
    if (slash == std::string::npos || k < 0 || n < 0)
      throw Error("--shard " + text + ": expected K/N (e.g. 0/4), slurm or slurm/N");
    return checked(k, n, text);
  }
  auto number_from = [&](const char* name) {
    const char* value = env(name);
    if (!value || !*value)
      throw Error("--shard " + text + ": " + name + " is not set (not a task of a Slurm job array?)");
    const int64_t v = parse_count(value);
    if (v < 0) throw Error("--shard " + text + ": " + name + "=" + value + " is not a number");
    return v;
  };
  const int64_t k = number_from("SLURM_ARRAY_TASK_ID");
  if (slash != std::string::npos) {
    const int64_t n = parse_count(second);
    if (n < 0) throw Error("--shard " + text + ": expected slurm/N with N a number");
    return checked(k, n, text);
  }
  const int64_t n = number_from("SLURM_ARRAY_TASK_COUNT");
  if (n < 1)
    throw Error("--shard slurm: SLURM_ARRAY_TASK_COUNT=" + std::to_string(n) +
                " is not a valid task count (an array has at least one task): give the number of shards with "
                "--shard slurm/N");
  if (k >= n)
    throw Error("--shard slurm: SLURM_ARRAY_TASK_ID=" + std::to_string(k) + " is not below SLURM_ARRAY_TASK_COUNT=" +
                std::to_string(n) + ": submit the array as --array=0-" + std::to_string(n - 1) +
                ", or give the number of shards with --shard slurm/N");
  return checked(k, n, text);
}

uint64_t shard_hash(const std::string& key) {
  const std::string hex = sha256_hex(key);
  return std::stoull(hex.substr(0, 16), nullptr, 16);
}

int64_t shard_of(const std::string& key, int64_t count) {
  return count <= 1 ? 0 : int64_t(shard_hash(key) % uint64_t(count));
}

std::vector<ScannedFile> files_in_shard(std::vector<ScannedFile> files, const ShardSpec& spec) {
  std::vector<ScannedFile> kept;
  for (ScannedFile& f : files)
    if (shard_of(f.relative.empty() ? f.path : f.relative, spec.count) == spec.index) kept.push_back(std::move(f));
  return kept;
}

}  // namespace qvl
