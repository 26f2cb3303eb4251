#!/usr/bin/env bash
# Same-run comparison of qvl with llama.cpp on the 2B language model's shapes
# (docs/PERFORMANCE.md "Same-run comparison with llama.cpp"). A measurement
# tool, not part of the build or tests. One command, from the repo root:
#
#   MODEL=path/to/synth-2b PROMPT_FILE=path/to/prompt.txt scripts/compare_llamacpp.sh
#
# Pairs qvl bf16 / int8 / int4 with llama.cpp BF16 / Q8_0 / Q4_K_M and runs
# each pair back to back, every run a fresh process with 2 threads, for ROUNDS
# rounds, so the ratios come from neighbouring minutes; then prints one table
# (scripts/llamacpp/summarize.py). ~6 minutes on an idle 2-core Zen 4 with
# ROUNDS=3 (an estimate from idle figures; 2 rounds took 15 minutes at load
# average 3-5), plus ~2 minutes the first time (GGUF files, llama.cpp install).
#
# Needs: node >= 20 and npm with registry access (the first run installs
# node-llama-cpp, whose prebuilt llama.cpp libraries it uses, into
# NODE_LLAMA_CPP_DIR, outside the repo); /usr/bin/python3 with numpy (the GGUF
# writer); /usr/bin/time; a built qvl (QVL). The GGUF files (BF16 written by
# scripts/llamacpp/make_gguf.py, Q8_0 and Q4_K_M by llama.cpp's own
# quantizer) are made once in GGUF_DIR and reused.
#
# Knobs: QVL (build/apps/qvl), ROUNDS (3), N new tokens (64), THREADS (2),
# QVL_LOAD (lazy), LLAMA_REPEAT (2: runs per llama.cpp process, the first one
# cold like qvl's lazy run), LLAMA_ARGS (more bench.mjs flags, e.g.
# "--flash-attention off"), OUT (results folder, default compare-llamacpp-<time>),
# QUANTS (which pairs, default "none int8 int4").
set -euo pipefail
# All of it in one function, read whole before it runs: editing this file
# during a run (bash reads scripts as it goes) cannot derail the run.
main() {
here=$(cd "$(dirname "$0")" && pwd)
M=${MODEL:?MODEL=<2B-shaped model folder>}
P=${PROMPT_FILE:?PROMPT_FILE=<~500-token text file>}
QVL=${QVL:-build/apps/qvl}
ROUNDS=${ROUNDS:-3}; N=${N:-64}; THREADS=${THREADS:-2}; QVL_LOAD=${QVL_LOAD:-lazy}
LLAMA_REPEAT=${LLAMA_REPEAT:-2}
PY=${PYTHON:-/usr/bin/python3}
export NODE_LLAMA_CPP_DIR=${NODE_LLAMA_CPP_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/qvl-llamacpp}
GGUF_DIR=${GGUF_DIR:-$NODE_LLAMA_CPP_DIR/models}
OUT=${OUT:-compare-llamacpp-$(date -u +%Y%m%dT%H%M%S)}

[ -x "$QVL" ] || { echo "compare_llamacpp: no qvl binary at $QVL (build it or set QVL)" >&2; exit 1; }
[ -r "$P" ] || { echo "compare_llamacpp: cannot read PROMPT_FILE $P" >&2; exit 1; }
[ -d "$M" ] || { echo "compare_llamacpp: MODEL $M is not a folder" >&2; exit 1; }
mkdir -p "$OUT" "$GGUF_DIR"
log() { echo "$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg) $*" | tee -a "$OUT/log"; }

# --- one-time setup, outside the repo --------------------------------------
if [ ! -d "$NODE_LLAMA_CPP_DIR/node_modules/node-llama-cpp" ]; then
  log "installing node-llama-cpp into $NODE_LLAMA_CPP_DIR"
  mkdir -p "$NODE_LLAMA_CPP_DIR"
  [ -f "$NODE_LLAMA_CPP_DIR/package.json" ] || echo '{"private": true}' > "$NODE_LLAMA_CPP_DIR/package.json"
  # Its postinstall step would try to download or build llama.cpp; the prebuilt
  # @node-llama-cpp/linux-x64 package it depends on is all this needs.
  (cd "$NODE_LLAMA_CPP_DIR" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --no-audit --no-fund node-llama-cpp@3.22.1)
fi
name=$(basename "$(cd "$M" && pwd)")
bf16=$GGUF_DIR/$name-bf16.gguf; q8=$GGUF_DIR/$name-q8_0.gguf; q4=$GGUF_DIR/$name-q4_k_m.gguf
[ -f "$bf16" ] || { log "writing $bf16"; "$PY" "$here/llamacpp/make_gguf.py" "$M" "$bf16"; }
[ -f "$q8" ] || { log "quantizing $q8"; "$PY" "$here/llamacpp/quantize.py" "$bf16" "$q8" Q8_0 --threads "$THREADS" > "$OUT/quantize-q8_0.log" 2>&1; }
[ -f "$q4" ] || { log "quantizing $q4"; "$PY" "$here/llamacpp/quantize.py" "$bf16" "$q4" Q4_K_M --threads "$THREADS" > "$OUT/quantize-q4_k_m.log" 2>&1; }

# --- the interleaved runs --------------------------------------------------
cpu_field() { grep -m1 -E "^$1\s*:" /proc/cpuinfo | cut -d: -f2 | xargs; }
echo "$(cpu_field 'model name') (family $(cpu_field 'cpu family'), model $(cpu_field model)), $(nproc) CPUs" > "$OUT/machine"
pairs=()
for q in ${QUANTS:-none int8 int4}; do
  case $q in none) pairs+=("none:$bf16") ;; int8) pairs+=("int8:$q8") ;; int4) pairs+=("int4:$q4") ;;
    *) echo "compare_llamacpp: QUANTS takes none, int8, int4, not $q" >&2; exit 1 ;; esac
done
# qvl builds its int8/int4 weight caches on first use; do that before timing.
for pair in "${pairs[@]}"; do
  q=${pair%%:*}; [ "$q" = none ] && continue
  "$QVL" bench --model "$M" --prompt "Hi" --load "$QVL_LOAD" --quant "$q" --repeat 1 -n 2 --no-probe --threads "$THREADS" > /dev/null 2>&1 || true
done
for r in $(seq 1 "$ROUNDS"); do
  for pair in "${pairs[@]}"; do
    q=${pair%%:*}; g=${pair#*:}; gname=$(basename "$g" .gguf)
    log "qvl $q r$r"
    "$QVL" bench --model "$M" --prompt "$(cat "$P")" --load "$QVL_LOAD" --quant "$q" --repeat 1 -n "$N" \
      --threads "$THREADS" --no-probe --json > "$OUT/qvl-$q-r$r.json" 2> "$OUT/qvl-$q-r$r.err" \
      || log "qvl $q r$r failed (see $OUT/qvl-$q-r$r.err)"
    log "llama.cpp $gname r$r"
    /usr/bin/time -v -o "$OUT/llama-$gname-r$r.time" node "$here/llamacpp/bench.mjs" --model "$g" --prompt-file "$P" \
      --threads "$THREADS" -n "$N" --repeat "$LLAMA_REPEAT" ${LLAMA_ARGS:-} --json > "$OUT/llama-$gname-r$r.jsonl" 2> "$OUT/llama-$gname-r$r.err" \
      || log "llama.cpp $gname r$r failed (see $OUT/llama-$gname-r$r.err)"
  done
done
log done
"$PY" "$here/llamacpp/summarize.py" "$OUT" | tee "$OUT/table.md"
}
main "$@"
exit
