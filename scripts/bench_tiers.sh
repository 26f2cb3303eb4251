#!/usr/bin/env bash
# qvl bench on every CPU tier, interleaved: round after round, one fresh
# `qvl bench --repeat 1` per tier, so a drift of the machine hits every tier
# alike (these VMs vary by 2x between hours: never compare with an old run).
#
#   scripts/bench_tiers.sh ROUNDS OUT.jsonl -- BENCH-ARGS...
#   e.g. scripts/bench_tiers.sh 3 tiers.jsonl -- --model models/synth-2b --image img640x480.jpg --load lazy
#
# Tiers: avx512 (if the CPU has it), avx2-vnni (if it has AVX-VNNI or
# AVX512-VNNI; not run unless QVL_TIERS names it), avx2, generic, each with the environment
# that makes libtorch, oneDNN and OpenBLAS behave as on a CPU of that tier
# (docs/PERFORMANCE.md, "CPU tiers"). QVL (default build/apps/qvl) is the
# binary; QVL_BASELINE=/path/to/old/qvl adds it as a tier "baseline" (the
# machine's best tier) for A/B runs of two builds. Each run is one JSON line
# {"tier": …, "round": …, "result": <qvl bench --json>} in OUT.jsonl; a
# summary (median and range per tier) follows on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] && [ "$3" = "--" ] || { echo "usage: $0 ROUNDS OUT.jsonl -- BENCH-ARGS..." >&2; exit 2; }
rounds=$1 out=$2
shift 3
QVL=${QVL:-build/apps/qvl}

tier_env() {
  case "$1" in
    avx512|baseline) echo "" ;;
    avx2|avx2-vnni) echo "QVL_ISA=$1 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell" ;;
    generic) echo "QVL_ISA=generic ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41 OPENBLAS_CORETYPE=Nehalem" ;;
  esac
}

tiers=()
[ -n "${QVL_BASELINE:-}" ] && tiers+=(baseline)
for t in ${QVL_TIERS:-avx512 avx2 generic}; do
  if env QVL_ISA="$t" "$QVL" --version > /dev/null 2>&1; then tiers+=("$t"); else echo "bench_tiers: skipping $t (not on this CPU)" >&2; fi
done

: > "$out"
echo "bench_tiers: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores; tiers: ${tiers[*]}" >&2
for round in $(seq 1 "$rounds"); do
  for t in "${tiers[@]}"; do
    bin=$QVL
    [ "$t" = baseline ] && bin=$QVL_BASELINE
    echo "bench_tiers: round $round/$rounds, $t" >&2
    result=$(env $(tier_env "$t") "$bin" bench --repeat 1 --json "$@")
    printf '{"tier":"%s","round":%d,"result":%s}\n' "$t" "$round" "$result" >> "$out"
  done
done

python3 - "$out" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    run = json.loads(line)
    for r in run["result"]:
        rows.setdefault((run["tier"], r["mode"], r["dtype"], r["quant"]), []).append(r)
keys = ["load_s", "vision_s", "prefill_tok_s", "decode_tok_s", "ttft_s", "peak_rss_mb"]
print("| tier | mode | dtype | quant | " + " | ".join(keys) + " |")
print("|" + " --- |" * (4 + len(keys)))
for (tier, mode, dtype, quant), runs in rows.items():
    cells = []
    for k in keys:
        v = [r[k] for r in runs if k in r]
        if not v: cells.append("—"); continue
        fmt = "{:.0f}" if k == "peak_rss_mb" else "{:.2f}"
        cell = fmt.format(statistics.median(v))
        if len(v) > 1: cell += " (" + fmt.format(min(v)) + "–" + fmt.format(max(v)) + ")"
        cells.append(cell)
    print(f"| {tier} | {mode} | {dtype} | {quant} | " + " | ".join(cells) + " |")
PY
