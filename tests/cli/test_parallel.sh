#!/usr/bin/env bash
# The README's GNU Parallel recipe, run on this machine: `parallel
# --sshloginfile HOSTS qvl ocr --shard {}/2 ...` with a login file that names
# only the local machine (":", no ssh), then `qvl ocr --merge`; the merged file
# equals one run over the same folder but for "ms". Skips (77) without parallel.
source "$(dirname "$0")/common.sh" "$@"
if ! command -v parallel > /dev/null; then
  echo "skipped: GNU Parallel is not installed (Debian package parallel)"
  exit 77
fi
QVL=$(realpath "$QVL") MODEL=$(realpath "$MODEL")
mkdir -p "$QVL_CACHE_DIR" && QVL_CACHE_DIR=$(realpath "$QVL_CACHE_DIR")

IN="$TMP/scans"
mkdir -p "$IN/b"
for i in 1 2 3 4 5 6; do { cat "$DATA/images/small.png"; printf '%s' "$i"; } > "$IN/page$i.png"; done
cp "$DATA/images/photo.jpg" "$IN/b/photo.jpg"
cp "$IN/page1.png" "$IN/b/page1-copy.png"
OUT="$TMP/out"
mkdir -p "$OUT"
# Two job slots on the local machine (":" is GNU Parallel's name for it).
printf '2/:\n' > "$TMP/hosts"

"$QVL" ocr --model "$MODEL" --dtype f32 -n 4 --threads 1 -r --output "$TMP/single.jsonl" "$IN" 2> "$TMP/single.err"
check "one run over the folder exits 0" "[ $? -eq 0 ] || dump '$TMP/single.err'"

N=2
parallel --will-cite --sshloginfile "$TMP/hosts" --joblog "$TMP/joblog" \
  "$QVL" ocr --model "$MODEL" --dtype f32 -n 4 --threads 1 --shard {}/$N --resume -q \
  --output "$OUT/shard-{}.jsonl" -r "$IN" ::: $(seq 0 $((N - 1))) > "$TMP/parallel.out" 2>&1
check "parallel ran both shards, each exiting 0" \
  "[ \$(awk 'NR > 1 && \$7 == 0' '$TMP/joblog' | wc -l) -eq 2 ] || dump '$TMP/joblog' '$TMP/parallel.out'"
check "... each writing its shard output" "[ -s '$OUT/shard-0.jsonl' ] && [ -s '$OUT/shard-1.jsonl' ] || dump '$TMP/parallel.out'"

"$QVL" ocr -r "$IN" --output "$TMP/merged.jsonl" --merge "$OUT"/shard-*.jsonl 2> "$TMP/merge.err"
check "qvl ocr --merge of the two shard outputs exits 0" "[ $? -eq 0 ] || dump '$TMP/merge.err'"
check "... every input once" "grep -q '8 records (0 errors) for 8 inputs from 2 shard outputs, each input once' '$TMP/merge.err' || dump '$TMP/merge.err'"
python3 - "$TMP/single.jsonl" "$TMP/merged.jsonl" <<'PY' && echo "ok: the merge equals one run, but for ms" || { echo "FAIL: the merge equals one run, but for ms"; fail=1; }
import json, sys
a, b = ([{k: v for k, v in json.loads(l).items() if k != "ms"} for l in open(f)] for f in sys.argv[1:])
assert len(a) == 8 and a == b, f"{len(a)} vs {len(b)} records, or they differ"
PY

exit $fail
