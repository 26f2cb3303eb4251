#!/usr/bin/env python3
"""One markdown table from a scripts/compare_llamacpp.sh results folder.

A measurement tool, not part of qvl's build or tests; python3 standard
library only.  Usage: python3 scripts/llamacpp/summarize.py RESULTS_DIR

Figures are medians over rounds with (min-max); the ratios are qvl / llama.cpp
per round (the two runs of a pair are neighbours in time), then the median and
range of those, which is what survives a busy machine best.
"""
import glob
import json
import os
import re
import statistics
import sys

PAIRS = [("none", "bf16", "qvl bf16", "llama.cpp BF16"),
         ("int8", "q8_0", "qvl int8", "llama.cpp Q8_0"),
         ("int4", "q4_k_m", "qvl int4", "llama.cpp Q4_K_M")]


def round_of(path):
    m = re.search(r"-r(\d+)\.", path)
    return int(m.group(1)) if m else 0


def read_qvl(out, quant):
    """round -> the single run of `qvl bench --json --repeat 1`."""
    runs = {}
    for path in glob.glob(os.path.join(out, f"qvl-{quant}-r*.json")):
        try:
            with open(path) as f:
                configs = json.load(f)
            runs[round_of(path)] = configs[0]["runs"][0]
        except (ValueError, LookupError, OSError):
            continue  # a failed run: its .err says why
    return runs


def read_llama(out, suffix):
    """round -> {rows: [one per repeat], rss_mb} from bench.mjs and /usr/bin/time."""
    runs = {}
    for path in glob.glob(os.path.join(out, f"llama-*-{suffix}-r*.jsonl")):
        rows = []
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
        if not rows:
            continue
        rss = None
        time_path = path[:-len(".jsonl")] + ".time"
        if os.path.exists(time_path):
            m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(time_path).read())
            rss = int(m.group(1)) / 1024 if m else None
        runs[round_of(path)] = {"rows": rows, "rss_mb": rss}
    return runs


def cell(values, fmt):
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    med = statistics.median(values)
    if fmt.format(min(values)) == fmt.format(max(values)):
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: summarize.py RESULTS_DIR")
    out = sys.argv[1]
    columns, ratios, info = [], [], {}
    for quant, suffix, qname, lname in PAIRS:
        q = read_qvl(out, quant)
        l = read_llama(out, suffix)
        for run in l.values():
            for key in ("llama_cpp", "cpu_backend", "threads"):
                if key in run["rows"][0]:
                    info[key] = run["rows"][0][key]
        decode_l = {r: statistics.median(x["decode_tok_s"] for x in run["rows"]) for r, run in l.items()}
        cold_l = {r: run["rows"][0]["prefill_tok_s"] for r, run in l.items()}
        warm_l = {r: statistics.median(x["prefill_tok_s"] for x in run["rows"][1:])
                  for r, run in l.items() if len(run["rows"]) > 1}
        columns.append((qname, {
            "decode": [x["decode_tok_s"] for x in q.values()],
            "prefill_cold": [x["prefill_tok_s"] for x in q.values()],
            "prefill_warm": [],
            "ready": [x["load_s"] for x in q.values()],
            "rss": [x["peak_rss_mb"] for x in q.values()],
            "tokens": [x["prompt_tokens"] for x in q.values()],
        }))
        columns.append((lname, {
            "decode": list(decode_l.values()),
            "prefill_cold": list(cold_l.values()),
            "prefill_warm": list(warm_l.values()),
            "ready": [run["rows"][0]["ready_s"] for run in l.values()],
            "rss": [run["rss_mb"] for run in l.values()],
            "tokens": [run["rows"][0]["prompt_tokens"] for run in l.values()],
        }))
        both = sorted(set(q) & set(l))
        ratios.append((f"{qname} / {lname.split()[-1]}", {
            "decode": [q[r]["decode_tok_s"] / decode_l[r] for r in both if decode_l[r] > 0],
            "prefill_cold": [q[r]["prefill_tok_s"] / cold_l[r] for r in both if cold_l[r] > 0],
            "prefill_warm": [q[r]["prefill_tok_s"] / warm_l[r] for r in both if warm_l.get(r)],
            "rounds": len(both),
        }))

    machine_path = os.path.join(out, "machine")
    machine = open(machine_path).read().strip() if os.path.exists(machine_path) else "?"
    loads = [float(m) for m in re.findall(r"load (\d+\.\d+)", open(os.path.join(out, "log")).read())] \
        if os.path.exists(os.path.join(out, "log")) else []
    print(f"Machine: {machine}")
    if loads:
        print(f"1-minute load average during the runs: {min(loads):.2f}–{max(loads):.2f}")
    print(f"llama.cpp: {info.get('llama_cpp', '?')} (node-llama-cpp prebuilt), "
          f"CPU library {info.get('cpu_backend', '?')}, {info.get('threads', '?')} threads")
    print()
    print("| | " + " | ".join(name for name, _ in columns) + " |")
    print("| --- |" + " --- |" * len(columns))
    rows = [("decode tok/s", "decode", "{:.2f}"),
            ("prefill tok/s, first in process (cold)", "prefill_cold", "{:.1f}"),
            ("prefill tok/s, later runs (warm)", "prefill_warm", "{:.1f}"),
            ("prompt tokens", "tokens", "{:.0f}"),
            ("ready s (start → model loaded)", "ready", "{:.2f}"),
            ("peak RSS MB", "rss", "{:.0f}")]
    for label, key, fmt in rows:
        print(f"| {label} | " + " | ".join(cell(c[key], fmt) for _, c in columns) + " |")
    print()
    print("Ratios qvl / llama.cpp, per round (pair run back to back), median (range):")
    print()
    print("| | " + " | ".join(name for name, _ in ratios) + " |")
    print("| --- |" + " --- |" * len(ratios))
    for label, key in [("decode", "decode"), ("prefill vs llama.cpp cold", "prefill_cold"),
                       ("prefill vs llama.cpp warm", "prefill_warm")]:
        print(f"| {label} | " + " | ".join(cell(c[key], "{:.2f}") for _, c in ratios) + " |")
    print(f"| rounds | " + " | ".join(str(c["rounds"]) for _, c in ratios) + " |")
    print()
    print("qvl's peak RSS is its own figure (qvl bench); llama.cpp's is /usr/bin/time's maximum RSS of "
          "the node process (includes node with the addon, ~90 MB).")


if __name__ == "__main__":
    main()
