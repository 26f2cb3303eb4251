#!/bin/bash
# One task of a qvl ocr job array: shard $SLURM_ARRAY_TASK_ID of $QVL_SHARDS,
# written to $QVL_OUT_DIR/shard-K.jsonl. Submitted by submit.sh (which sets
# QVL_SHARDS and QVL_OUT_DIR); the arguments are qvl ocr's (flags and paths).
#
# --resume: a task that is re-run (requeued after a node failure, preempted,
# or submitted again by hand with `sbatch --array=K ...`) continues its shard.
#SBATCH --job-name=qvl-ocr
set -u
: "${QVL_SHARDS:?set by submit.sh: the number of shards}" "${QVL_OUT_DIR:?set by submit.sh: the output folder}"
"${QVL:-qvl}" ocr --shard "slurm/$QVL_SHARDS" --resume --threads "${SLURM_CPUS_PER_TASK:-1}" \
  --output "$QVL_OUT_DIR/shard-$SLURM_ARRAY_TASK_ID.jsonl" "$@"
status=$?
# 3: some files got error records. Those are results like any other; the task
# succeeded and the merge (afterok) must still run.
[ $status -eq 3 ] && status=0
exit $status
