#!/usr/bin/env bash
# Warm prompt-cache time to first token, two qvl binaries alternated (docs/PERFORMANCE.md
# "Tokenizer cache"): one cold run per binary and load mode into its own prompt-cache folder,
# then ROUNDS rounds of a new question each, lazy and eager, every run a fresh process, with
# the process's CPU time (user + sys does not depend on what else the machine runs). Usage:
#   BEFORE=old/qvl AFTER=build/apps/qvl MODEL=synth-2b IMAGE=img640x480.png ROUNDS=4 \
#   scripts/bench_prompt_cache_ab.sh
# QUANT=int8 (or int4) asks with --quant; the default is none.
# Removes the model's tokenizer cache first, so the first "after" run writes it.
set -u
B=${BEFORE:?old qvl binary}; A=${AFTER:-build/apps/qvl}; M=${MODEL:?2B-shaped model folder}
I=${IMAGE:?a 640x480 image}; R=${ROUNDS:-4}; Q=${QUANT:-none}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
run() {  # label binary load question
  /usr/bin/time -f "%U %S" -o "$work/time" "$2" ask --model "$M" --image "$I" --load "$3" --quant "$Q" \
    --prompt-cache "$work/pc-$1-$3" -n 4 --json "$4" > "$work/out.json" 2> /dev/null || { echo "$1 $3: failed"; return; }
  python3 - "$1" "$3" "$work" <<'PY'
import json, sys
label, load, work = sys.argv[1:]
d = json.load(open(work + "/out.json")); t = d["timings"]
user, sys_ = map(float, open(work + "/time").read().split()[-2:])
print("%-6s %-5s ttft %.3f load %.3f image %.3f prompt_cache %.3f prefill %.3f reused %d cpu %.2f" % (
    label, load, t["ttft_s"], t["load_s"], t["image_s"], t["prompt_cache_s"], t["prefill_s"],
    d["prompt_cache"]["reused_tokens"], user + sys_))
PY
}
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
rm -f "$M"/.qvl-cache/tokenizer-*.bin
for L in lazy eager; do
  run before "$B" $L "Describe"; run after "$A" $L "Describe"
done
for i in $(seq 1 "$R"); do
  for L in lazy eager; do
    run before "$B" $L "What is in the picture, take $i?"; run after "$A" $L "What is in the picture, take $i?"
  done
done
echo "end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
