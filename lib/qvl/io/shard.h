// Splitting one `qvl ocr` job into N independent shards (`--shard K/N`), for
// Slurm job arrays, GNU Parallel over ssh hosts, or anything else that starts
// N processes and knows each one's number.
//
// A file's shard depends on the file alone: the SHA-256 of its path relative to
// the argument it was found under (ScannedFile::relative), read as a number, mod
// N. Files added to an archive later never move old files to another shard, so
// each shard's `--resume` keeps working; any machine computes the same split.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qvl/io/file_scan.h"

namespace qvl {

struct ShardSpec {
  int64_t index = 0;  // K: 0 .. count-1 (as Slurm array indices count)
  int64_t count = 1;  // N
};

// Reads an environment variable; nullptr when unset (::getenv by default).
using EnvLookup = std::function<const char*(const char*)>;

// "K/N"; "slurm" (K from SLURM_ARRAY_TASK_ID, N from SLURM_ARRAY_TASK_COUNT);
// "slurm/N" (K from SLURM_ARRAY_TASK_ID, N given: what a re-submitted single
// task of the array needs, whose SLURM_ARRAY_TASK_COUNT is 1). Throws
// qvl::Error with a one-line message saying what is wrong.
ShardSpec parse_shard_spec(const std::string& text, const EnvLookup& env = nullptr);

// The first 8 bytes of SHA-256(key) as a big-endian number: the same on every
// machine (`printf %s KEY | sha256sum`, first 16 hex digits).
uint64_t shard_hash(const std::string& key);
int64_t shard_of(const std::string& key, int64_t count);

// The files of shard `spec`, in their order; by shard_of(file.relative).
std::vector<ScannedFile> files_in_shard(std::vector<ScannedFile> files, const ShardSpec& spec);

}  // namespace qvl
