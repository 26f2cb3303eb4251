#!/bin/bash
# The last job: joins the $QVL_SHARDS shard outputs in $QVL_OUT_DIR into
# ${QVL_MERGED:-$QVL_OUT_DIR/merged.jsonl}, in the order one run would have
# written them. Submitted by submit.sh with --dependency=afterok on the array;
# the arguments are the same qvl ocr arguments the array got (the merge uses
# the paths, --recursive and --glob to check that every input is there once).
#SBATCH --job-name=qvl-ocr-merge
set -u
: "${QVL_SHARDS:?set by submit.sh}" "${QVL_OUT_DIR:?set by submit.sh}"
shards=()
for ((k = 0; k < QVL_SHARDS; k++)); do shards+=("$QVL_OUT_DIR/shard-$k.jsonl"); done
# --force: the merged file is derived from the shard outputs; merging again replaces it.
exec "${QVL:-qvl}" ocr "$@" --force --output "${QVL_MERGED:-$QVL_OUT_DIR/merged.jsonl}" --merge "${shards[@]}"
