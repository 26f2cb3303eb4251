#!/usr/bin/env bash
# qvl bench on the tiny model: each configuration is measured in fresh
# processes, every figure is numeric (positive where it must be), the summary
# agrees with the raw runs, the table shows one row per mode, and bad
# selections or a failing child end with one clear line.
source "$(dirname "$0")/common.sh" "$@"

# Defaults: both load modes in bf16, every supported quantization (none, int8, int4).
"$QVL" bench --model "$MODEL" --image "$DATA/images/small.png" --repeat 1 --max-new-tokens 4 --json \
  > "$TMP/image.json" 2> "$TMP/image.err"
rc=$?
check "bench --json with an image exits 0" "[ $rc -eq 0 ] || { cat '$TMP/image.err'; false; }"
check "... and reports progress on stderr" "grep -q 'bench: \[6/6\]' '$TMP/image.err'"
python3 - "$TMP/image.json" <<'PY' || fail=1
import json, os, sys
rows = json.load(open(sys.argv[1]))
assert isinstance(rows, list), "the output is not a JSON array"
modes = sorted(r["mode"] for r in rows)
assert modes == ["eager"] * 3 + ["lazy"] * 3, f"rows for modes {modes}, expected lazy and eager three times"
assert sorted(r["quant"] for r in rows) == ["int4", "int4", "int8", "int8", "none", "none"], "expected every mode with none, int8 and int4"
measures = ["load_s", "peak_rss_mb", "vision_s", "prefill_tok_s", "decode_tok_s", "ttft_s"]
def positive(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
for r in rows:
    where = r["mode"] + " " + r["quant"]
    assert r["dtype"] == "bf16", f"{where}: dtype {r['dtype']}"
    assert len(r["runs"]) == 1, f"{where}: {len(r['runs'])} runs for --repeat 1"
    run = r["runs"][0]
    for key in measures:
        assert positive(r[key]), f"{where}: {key} = {r[key]!r} is not a positive number"
        assert positive(r["min"][key]), f"{where}: min.{key} = {r['min'][key]!r} is not a positive number"
        assert r[key] == run[key] == r["min"][key], f"{where}: one run, yet {key} median/min differ from the run"
    assert (run["mode"], run["dtype"], run["quant"]) == (r["mode"], "bf16", r["quant"]), f"{where}: the run measured {run['mode']} {run['dtype']} {run['quant']}"
    assert run["generated_tokens"] == 4, f"{where}: {run['generated_tokens']} tokens, expected exactly 4 (EOS ignored)"
    assert run["prompt_tokens"] > 0, f"{where}: no prompt tokens"
    # Process start to ready covers more than constructing the Session.
    assert run["load_s"] >= run["session_load_s"] > 0, f"{where}: load_s {run['load_s']} < session {run['session_load_s']}"
    assert run["ttft_s"] >= run["vision_s"], f"{where}: ttft {run['ttft_s']} shorter than the vision encoder"
    # The machine probe (on by default) and the efficiencies it allows.
    m = r["machine"]
    assert isinstance(m["cpu"], str) and m["cpu"] and m["isa"] and m["threads"] >= 1, f"{where}: machine {m}"
    for key in ("read_gb_s", "bf16_gflop_s", "int8_gop_s"):
        assert positive(m[key]), f"{where}: machine.{key} = {m.get(key)!r}"
    # How the page cache holds the checkpoint (a kernel before 5.14 cannot say).
    if "checkpoint_map_s_per_gb" in m or tuple(map(int, os.uname().release.split(".")[:2])) >= (5, 14):
        assert 0 <= m["checkpoint_map_s_per_gb"] < 10, f"{where}: machine {m}"
    assert m == rows[0]["machine"], "one machine for every configuration"
    for key in ("decode_weight_bytes", "prefill_flops", "vision_flops"):
        assert positive(run[key]), f"{where}: run.{key} = {run.get(key)!r}"
    e = r["efficiency"]
    assert sorted(e) == ["decode", "prefill", "vision"], f"{where}: efficiency fields {sorted(e)}"
    # decode = bytes per token x tok/s / bandwidth, from the reported figures.
    want = run["decode_weight_bytes"] * r["decode_tok_s"] / (m["read_gb_s"] * 1e9)
    assert abs(e["decode"] - want) <= 1e-9 * want, f"{where}: decode efficiency {e['decode']} != {want}"
    # int8 and int4 run the vision blocks' linears through the int8 GEMM: that ceiling.
    ceiling = m["bf16_gflop_s"] if r["quant"] == "none" else m["int8_gop_s"]
    want = run["vision_flops"] / r["vision_s"] / (ceiling * 1e9)
    assert abs(e["vision"] - want) <= 1e-9 * want, f"{where}: vision efficiency {e['vision']} != {want}"
    assert all(positive(v) for v in e.values()), f"{where}: efficiency {e}"
    assert run["contenders"] == 0, f"{where}: {run['contenders']} contenders without --contend"
    # The decode steps (4 tokens: the first comes from the prefill) by thread
    # count: a bf16 run without --threads lets the tuner choose in 1..threads.
    dt = run["decode_threads"]
    assert dt["adapt"] is True, f"{where}: decode_threads {dt}"
    assert sum(dt["steps"].values()) == 3, f"{where}: decode steps {dt['steps']}, expected 3"
    assert all(1 <= int(t) <= m["threads"] for t in dt["steps"]), f"{where}: steps on {sorted(dt['steps'])} threads"
    assert dt["switches"] <= dt["probes"], f"{where}: {dt}"
# Bytes per decode token, worked out by hand in tests/unit/test_model_cost.cpp:
# bf16 2 x (5095424 matrix + 1312 vector elements); int8 pads the tiny model's
# 32-wide rows to groups of 128 bytes (+ a float scale each), so it is larger;
# int4 pads them to 128 columns: 72 bytes a row with the float16 scales and offsets.
by_quant = {r["quant"]: r["runs"][0]["decode_weight_bytes"] for r in rows}
assert by_quant == {"none": 10193472, "int8": 20784704, "int4": 11338304}, f"decode bytes {by_quant}"
print("ok: JSON has both modes with every measure positive, the machine and the efficiencies")
PY

# Text only (no --image), two dtypes, two runs each: medians and minima follow from the raw runs.
"$QVL" bench --model "$MODEL" --load lazy --dtype bf16,f32 --quant none --repeat 2 -n 3 --no-probe --json \
  > "$TMP/text.json" 2> "$TMP/text.err"
rc=$?
check "text-only bench over two dtypes exits 0" "[ $rc -eq 0 ] || { cat '$TMP/text.err'; false; }"
python3 - "$TMP/text.json" <<'PY' || fail=1
import json, statistics, sys
rows = json.load(open(sys.argv[1]))
got = [(r["mode"], r["dtype"], r["quant"]) for r in rows]
assert got == [("lazy", "bf16", "none"), ("lazy", "f32", "none")], f"rows {got}"
for r in rows:
    assert len(r["runs"]) == 2, f"{r['dtype']}: {len(r['runs'])} runs for --repeat 2"
    assert r["vision_s"] == 0, f"{r['dtype']}: text-only question but vision_s = {r['vision_s']}"
    for key in ("load_s", "peak_rss_mb", "prefill_tok_s", "decode_tok_s", "ttft_s"):
        values = [run[key] for run in r["runs"]]
        assert abs(r[key] - statistics.median(values)) < 1e-9, f"{r['dtype']}: {key} {r[key]} is not the median of {values}"
        assert r["min"][key] == min(values), f"{r['dtype']}: min.{key} {r['min'][key]} is not the min of {values}"
        assert r[key] > 0, f"{r['dtype']}: {key} = {r[key]}"
    assert all(run["dtype"] == r["dtype"] for run in r["runs"]), f"{r['dtype']}: runs measured another dtype"
    # --no-probe: the machine is named but not measured, so no efficiency.
    assert r["machine"]["threads"] >= 1 and "read_gb_s" not in r["machine"], f"{r['dtype']}: machine {r['machine']}"
    assert r["efficiency"] == {}, f"{r['dtype']}: efficiency {r['efficiency']} without a probe"
    # float32 keeps its thread count (OpenBLAS's threads do its matmuls).
    if r["dtype"] == "f32":
        for run in r["runs"]:
            assert run["decode_threads"]["adapt"] is False, f"f32: decode_threads {run['decode_threads']}"
print("ok: text-only medians and minima follow from the runs")
PY

# --threads 2: the user's count, kept for every step (no tuner).
"$QVL" bench --model "$MODEL" --load eager --quant none,int8 --repeat 1 -n 3 --threads 2 --no-probe --json \
  > "$TMP/threads2.json" 2> "$TMP/threads2.err"
rc=$?
check "--threads 2 exits 0" "[ $rc -eq 0 ] || { cat '$TMP/threads2.err'; false; }"
check "... and decodes every step on 2 threads, without a tuner" "python3 -c '
import json, sys
for r in json.load(open(sys.argv[1])):
    dt = r[\"runs\"][0][\"decode_threads\"]
    assert dt == {\"adapt\": False, \"steps\": {\"2\": 2}, \"probes\": 0, \"switches\": 0}, dt
' '$TMP/threads2.json'"

# The table: a header and one row per mode.
"$QVL" bench --model "$MODEL" --image "$DATA/images/small.png" --repeat 1 -n 2 --no-probe > "$TMP/table.txt" 2> "$TMP/table.err"
rc=$?
check "table mode exits 0" "[ $rc -eq 0 ] || { cat '$TMP/table.err'; false; }"
check "... with a header naming the measures" \
  "head -1 '$TMP/table.txt' | grep -q '^mode  *dtype  *quant  *load_s  *peak_rss_mb  *vision_s  *prefill_tok_s  *decode_tok_s  *ttft_s\$'"
check "... a lazy row" "grep -Eq '^lazy +bf16 +none( +[0-9.]+ \([0-9.]+\)){6}\$' '$TMP/table.txt'"
check "... an eager row" "grep -Eq '^eager +bf16 +none( +[0-9.]+ \([0-9.]+\)){6}\$' '$TMP/table.txt'"
check "... and a machine line, not probed" "grep -Eq '^machine: .+, [0-9]+ threads? \(not probed\)\$' '$TMP/table.txt'"

# Probed, beside one busy-loop process: efficiency columns, the machine's
# ceilings, and no busy loop left behind.
"$QVL" bench --model "$MODEL" --load eager --quant none --repeat 1 -n 2 --contend 1 > "$TMP/contend.txt" 2> "$TMP/contend.err"
rc=$?
check "--contend 1 exits 0" "[ $rc -eq 0 ] || { cat '$TMP/contend.err'; false; }"
check "... with the efficiency columns" "head -1 '$TMP/contend.txt' | grep -q 'ttft_s  *decode_%bw  *prefill_%gemm  *vision_%gemm\$'"
check "... a row with percentages (vision: none, text only)" "grep -Eq '^eager +bf16 +none( +[0-9.]+ \([0-9.]+\)){6} +[0-9]+% +[0-9]+% +-\$' '$TMP/contend.txt'"
check "... saying the runs were contended" "grep -q 'beside 1 busy-loop process;' '$TMP/contend.txt'"
check "... and what the machine did" "grep -Eq '^machine: .+: read [0-9.]+ GB/s, bf16 GEMM [0-9]+ GFLOP/s, int8 GEMM [0-9]+ GOP/s(, checkpoint maps in [0-9.]+ CPU s/GB)?\$' '$TMP/contend.txt'"
check "... leaving no busy-loop process running" "! pgrep -f 'bench --model .*--contend 1\$' > /dev/null"
"$QVL" bench --model "$MODEL" --contend -1 > /dev/null 2>&1
check "--contend -1 exits 2" "[ $? -eq 2 ]"

# Unsupported selections: exit 2 with a message naming the value and what is supported.
"$QVL" bench --model "$MODEL" --quant int3 > "$TMP/quant.out" 2> "$TMP/quant.err"
rc=$?
check "--quant int3 exits non-zero" "[ $rc -ne 0 ]"
check "... saying int3 is not supported and what is" \
  "grep -q \"'int3' is not supported (supported: none, int8, int4)\" '$TMP/quant.err' || { cat '$TMP/quant.err'; false; }"
check "... and prints nothing on stdout" "[ ! -s '$TMP/quant.out' ]"
"$QVL" bench --model "$MODEL" --load lazy,fast > /dev/null 2>&1
check "--load lazy,fast exits 2" "[ $? -eq 2 ]"

# A child that fails: the bench exits 1 with the child's error line.
mkdir -p "$TMP/broken" && cp "$MODEL"/*.json "$TMP/broken/" && cp "$MODEL"/model-0000*.safetensors "$TMP/broken/"
truncate -s 1000000 "$TMP/broken/model-00001-of-00002.safetensors"
"$QVL" bench --model "$TMP/broken" --repeat 1 -n 2 -q > "$TMP/broken.out" 2> "$TMP/broken.err"
rc=$?
check "a failing child makes bench exit 1" "[ $rc -eq 1 ]"
check "... with one line naming the run and the child's error" \
  "[ \$(wc -l < '$TMP/broken.err') -eq 1 ] && grep -q 'bench run lazy bf16 none failed: .*model-00001-of-00002.safetensors' '$TMP/broken.err' || { cat '$TMP/broken.err'; false; }"

"$QVL" --help > "$TMP/help.txt" 2>&1
check "--help lists bench but hides bench-run" "grep -q ' bench ' '$TMP/help.txt' && ! grep -q 'bench-run' '$TMP/help.txt'"

exit $fail
