#!/usr/bin/env bash
# The before/after runs of docs/PERFORMANCE.md "Issue 14 before/after": two qvl
# binaries alternated on the 2B shapes, every run a fresh process. Usage:
#   BEFORE=old/qvl AFTER=build/apps/qvl MODEL=synth-2b IMAGE=img640x480.png \
#   PROMPT_FILE=prompt495.txt OUT=results/ scripts/bench_issue14.sh
# BEFORE_QUANTS: the quantizations the "before" binary knows (default none,int8:
# 7cbf335 predates int4; set none,int8,int4 for a newer one). Only flags
# 7cbf335 knew are given to it (no --no-probe). PARTS: which parts to run
# (default "img text fair pcache avx2"; "tune" is extra: the decode thread
# tuner, ~5 minutes). All the default parts take ~16 minutes.
# PCACHE_BEFORE=1: the prompt-cache part also runs the "before" binary.
set -u
B=${BEFORE:?old qvl binary}; A=${AFTER:-build/apps/qvl}; M=${MODEL:?2B-shaped model folder}
I=${IMAGE:?a 640x480 image}; P="$(cat "${PROMPT_FILE:?a ~500-token text prompt file}")"
BQ=${BEFORE_QUANTS:-none,int8}
PARTS=" ${PARTS:-img text fair pcache avx2} "
part() { [[ $PARTS == *" $1 "* ]]; }
out=${OUT:-bench-issue14}; mkdir -p "$out"
log() { echo "$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $*" | tee -a "$out/log"; }
grep -m2 -E "cpu family|^model\s" /proc/cpuinfo >> "$out/log"
part img && for r in 1 2; do
  log "img before r$r"; "$B" bench --model "$M" --image "$I" --load lazy,eager --quant "$BQ" --repeat 2 -n 32 --json > "$out/img-before-$r.json" 2> "$out/img-before-$r.err"
  log "img after r$r";  "$A" bench --model "$M" --image "$I" --load lazy,eager --quant none,int8,int4 --repeat 2 -n 32 --json > "$out/img-after-$r.json" 2> "$out/img-after-$r.err"
done
part text && for r in 1 2; do
  log "text before r$r"; "$B" bench --model "$M" --prompt "$P" --load eager --quant none,int8 --repeat 2 -n 8 --json > "$out/text-before-$r.json" 2> "$out/text-before-$r.err"
  log "text after r$r";  "$A" bench --model "$M" --prompt "$P" --load eager --quant none,int8 --repeat 2 -n 8 --no-probe --json > "$out/text-after-$r.json" 2> "$out/text-after-$r.err"
done
# Fairness: the same busy loop beside both binaries.
part fair && for r in 1 2; do
  for who in before after; do
    bin=$B; extra=(); [ $who = after ] && { bin=$A; extra=(--no-probe); }
    log "fair alone $who r$r"; "$bin" bench --model "$M" --prompt "$P" --load eager --quant none --repeat 1 -n 32 "${extra[@]}" --json > "$out/fair-alone-$who-$r.json" 2> "$out/fair-alone-$who-$r.err"
    bash -c 'while :; do :; done' & busy=$!
    log "fair busy $who r$r"; "$bin" bench --model "$M" --prompt "$P" --load eager --quant none --repeat 1 -n 32 "${extra[@]}" --json > "$out/fair-busy-$who-$r.json" 2> "$out/fair-busy-$who-$r.err"
    kill $busy; wait $busy 2>/dev/null
  done
done
# The decode thread tuner (fair8): 64 tokens so it has steps to settle, bf16
# and int8, alone and beside bench's own busy loop, the two binaries
# alternating (the "before" one needs --contend and --no-probe: c22ec0e on).
part tune && for r in 1 2 3; do
  for n in 0 1; do for q in none int8; do for who in before after; do
    bin=$B; [ $who = after ] && bin=$A
    log "tune contend=$n $q $who r$r"; "$bin" bench --model "$M" --prompt "$P" --load eager --quant $q --repeat 1 -n 64 --contend $n --no-probe --json > "$out/tune-c$n-$q-$who-$r.json" 2> "$out/tune-c$n-$q-$who-$r.err"
  done; done; done
done
# Prompt cache: one cold question, then three others about the same image, by
# the "after" binary, and by "before" too when PCACHE_BEFORE=1 (it must know
# --prompt-cache), the two alternating.
pc_bins=(after); [ "${PCACHE_BEFORE:-0}" = 1 ] && pc_bins=(before after)
part pcache && for load in lazy eager; do
  for who in "${pc_bins[@]}"; do
    bin=$A; [ $who = before ] && bin=$B
    rm -rf "$out/prompts-$who"
    log "pcache cold $load $who"; "$bin" ask --model "$M" --image "$I" --load $load --prompt-cache "$out/prompts-$who" -n 8 --json "What is in this picture?" > "$out/pc-cold-$load-$who.json" 2> "$out/pc-cold-$load-$who.err"
  done
  for q in "Describe the colours." "Is there any text?" "What is in the corner?"; do
    for who in "${pc_bins[@]}"; do
      bin=$A; [ $who = before ] && bin=$B
      log "pcache warm $load $who"; "$bin" ask --model "$M" --image "$I" --load $load --prompt-cache "$out/prompts-$who" -n 8 --json "$q" >> "$out/pc-warm-$load-$who.json" 2>> "$out/pc-warm-$load-$who.err"
    done
  done
done
# The avx2 tier on this CPU.
part avx2 && for r in 1 2; do
  log "avx2 after r$r";  QVL_ISA=avx2 "$A" bench --model "$M" --prompt "Describe a cat in one sentence." --load eager --quant none,int8,int4 --repeat 1 -n 32 --json > "$out/avx2-dec-after-$r.json" 2> "$out/avx2-dec-after-$r.err"
  log "avx2 before r$r"; QVL_ISA=avx2 "$B" bench --model "$M" --prompt "Describe a cat in one sentence." --load eager --quant "$BQ" --repeat 1 -n 32 --json > "$out/avx2-dec-before-$r.json" 2> "$out/avx2-dec-before-$r.err"
  log "avx2 text after r$r";  QVL_ISA=avx2 "$A" bench --model "$M" --prompt "$P" --load eager --quant none,int8 --repeat 1 -n 4 --no-probe --json > "$out/avx2-text-after-$r.json" 2> "$out/avx2-text-after-$r.err"
  log "avx2 text before r$r"; QVL_ISA=avx2 "$B" bench --model "$M" --prompt "$P" --load eager --quant none,int8 --repeat 1 -n 4 --json > "$out/avx2-text-before-$r.json" 2> "$out/avx2-text-before-$r.err"
done
log done
