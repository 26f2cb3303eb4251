#!/bin/bash
# Submits a qvl ocr job array of N shards and a merge job that runs when all of
# them have succeeded:
#
#   scripts/slurm/submit.sh N OUT_DIR [qvl ocr flags and paths]...
#
#   QVL_MODEL=/shared/models/Qwen3-VL-2B-Instruct \
#   QVL_SBATCH_ARGS="--cpus-per-task=8 --mem=8G --time=12:00:00 --partition=batch" \
#     scripts/slurm/submit.sh 100 /shared/ocr-out --recursive --batch 8 /shared/archive
#
# Writes OUT_DIR/shard-K.jsonl (K = 0..N-1), OUT_DIR/merged.jsonl and
# OUT_DIR/logs/. Paths must be the same on every node (a shared file system).
# Environment: QVL (the qvl binary, default: qvl on PATH), QVL_MODEL (or give
# --model), QVL_SBATCH_ARGS (extra sbatch options for the array tasks, split on
# spaces), QVL_MERGED (the merged file). Everything else set here reaches the
# jobs (sbatch's default --export=ALL). Do not pass --shard, --resume or
# --output: the scripts set them. To re-run failed tasks, submit them again
# (they resume) and then the merge:
#   QVL_SHARDS=N QVL_OUT_DIR=OUT_DIR sbatch --array=3,17 scripts/slurm/ocr_array.sh ARGS...
#   QVL_SHARDS=N QVL_OUT_DIR=OUT_DIR sbatch --dependency=afterok:JOB scripts/slurm/ocr_merge.sh ARGS...
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
shards=$1
out_dir=$2
shift 2
case "$shards" in '' | *[!0-9]* | 0) echo "submit.sh: N must be a number of shards ≥ 1, not '$shards'" >&2; exit 2 ;; esac
mkdir -p "$out_dir/logs"
out_dir=$(cd "$out_dir" && pwd)
export QVL_SHARDS=$shards QVL_OUT_DIR=$out_dir
# shellcheck disable=SC2086  # QVL_SBATCH_ARGS is a list of options
array=$(sbatch --parsable ${QVL_SBATCH_ARGS:-} --array="0-$((shards - 1))" \
  --output="$out_dir/logs/shard-%a.log" "$here/ocr_array.sh" "$@")
array=${array%%;*}  # "jobid;cluster" on a multi-cluster setup
merge=$(sbatch --parsable --dependency="afterok:$array" --kill-on-invalid-dep=yes \
  --output="$out_dir/logs/merge.log" "$here/ocr_merge.sh" "$@")
merge=${merge%%;*}
echo "qvl ocr: array job $array ($shards shards) and merge job $merge: ${QVL_MERGED:-$out_dir/merged.jsonl}"
