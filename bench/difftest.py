#!/usr/bin/env python3
"""Differential run: N random ONNX graphs (seeds START..START+N-1) through `memplan run` and ONNX Runtime.

Writes a Markdown summary (graphs, agree, refused by reason, skipped, disagreements and crashes with a minimal
reproducer each under --repro) to --out. The generator and the comparison live in tests/python/difftest_*.py
(the CI slice, tests/python/test_differential.py, runs a fixed seed range of the same graphs).

  python3 bench/difftest.py 10000 --memplan build/memplan --jobs 2
Exit status: 0 when no graph disagrees or crashes, 1 otherwise.
"""
import argparse
import collections
import datetime
import multiprocessing
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

import difftest_run as dr  # noqa: E402

_ops = None
_memplan = None


def _init(memplan, ops):
    global _ops, _memplan
    _memplan, _ops = memplan, ops


def _chunk(args):
    seeds, batch = args
    res = dr.run_seeds(_memplan, seeds, _ops, batch=batch)
    # Graph objects do not travel between processes: failing ones are written by the worker.
    out = []
    for seed, verdict, detail, ops, g in res:
        repro = dr.write_repro(g, _repro_dir) if g is not None else ""
        out.append((seed, verdict, detail, ops, repro))
    return out


_repro_dir = None


def main():
    global _repro_dir
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, help="number of graphs")
    ap.add_argument("--start", type=int, default=0, help="first seed")
    ap.add_argument("--memplan", default=os.path.join(HERE, "..", "build", "memplan"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32, help="graphs per memplan invocation")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "difftest_2026-11-24.md"))
    ap.add_argument("--repro", default=os.path.join(HERE, "results", "difftest_repro"))
    a = ap.parse_args()
    _repro_dir = os.path.relpath(a.repro)
    ops = dr.load_ops(a.memplan)
    seeds = list(range(a.start, a.start + a.n))
    chunks = [(seeds[k:k + 4 * a.batch], a.batch) for k in range(0, len(seeds), 4 * a.batch)]
    t0 = time.time()
    results = []
    with multiprocessing.Pool(a.jobs, initializer=_init, initargs=(a.memplan, ops)) as pool:
        for k, part in enumerate(pool.imap(_chunk, chunks)):
            results += part
            if k % 10 == 0:
                c = collections.Counter(v for _, v, *_ in results)
                print(f"{len(results)}/{len(seeds)} graphs, {time.time() - t0:.0f} s: {dict(c)}", flush=True)
    secs = time.time() - t0
    write_summary(a, ops, results, secs)
    bad = [r for r in results if r[1] in ("disagree", "crash")]
    print(f"{len(results)} graphs in {secs:.0f} s; {len(bad)} disagreements or crashes; summary in {a.out}")
    return 1 if bad else 0


def write_summary(a, ops, results, secs):
    c = collections.Counter(v for _, v, *_ in results)
    version = subprocess.run([a.memplan, "--version"], capture_output=True, text=True).stdout.strip()
    import onnx
    import onnxruntime
    lines = [f"# Differential run against ONNX Runtime, {datetime.date(2026, 11, 24)}", "",
             f"`python3 bench/difftest.py {a.n} --start {a.start} --jobs {a.jobs} --batch {a.batch}` "
             f"({version}, onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__} CPU, "
             f"{platform.machine()} {os.cpu_count()} cores, {secs:.0f} s).", "",
             "Each seed is one random graph of 1-6 ops drawn from `memplan ops --json` (ONNX-domain ops with a shape "
             "rule and a CPU kernel) with onnx's schemas (tests/python/difftest_lib.py, difftest_recipes.py). "
             "memplan's outputs must match ONNX Runtime's (float32/64: rtol 1e-4, atol 1e-5; through float16: "
             "rtol 1e-2, atol 1e-2; integers and bools exactly; NaN and infinity positions equal), and every "
             "tensor's shape from `memplan analyze --json --shapes` must equal the shape ORT computes. "
             "Skipped: ORT refuses the graph (the generator built an invalid one). Refused: memplan exits with a "
             "documented error code and a message.", "",
             "| verdict | graphs |", "|---|---:|"]
    for v in ("agree", "refused", "disagree", "crash", "skipped", "empty"):
        lines.append(f"| {v} | {c.get(v, 0)} |")
    lines.append(f"| **total** | {len(results)} |")
    lines += ["", f"{len(ops)} op types generated: {', '.join(sorted(ops))}.", ""]
    per_op = collections.defaultdict(collections.Counter)
    for _, v, _, op_list, _ in results:
        for op in set(op_list):
            per_op[op][v] += 1
    lines += ["## Coverage per op (graphs containing it)", "", "| op | agree | refused | skipped | disagree+crash |",
              "|---|---:|---:|---:|---:|"]
    for op in sorted(ops):
        k = per_op.get(op, collections.Counter())
        lines.append(f"| {op} | {k['agree']} | {k['refused']} | {k['skipped']} | {k['disagree'] + k['crash']} |")
    reasons = collections.Counter(d for _, v, d, *_ in results if v == "refused")
    example = {}
    for s, v, d, *_ in results:
        if v == "refused":
            example.setdefault(d, s)
    lines += ["", "## Refused, by reason", "", "| graphs | reason (names and numbers elided) | first seed |",
              "|---:|---|---:|"]
    for d, n in reasons.most_common():
        lines.append(f"| {n} | {d.replace('|', '/')} | {example[d]} |")
    skipped = collections.Counter(dr.reason_of(d)[:100] for _, v, d, *_ in results if v == "skipped")
    lines += ["", "## Skipped (ONNX Runtime refused the generated graph), most common", "", "| graphs | ORT says |",
              "|---:|---|"]
    for d, n in skipped.most_common(10):
        lines.append(f"| {n} | {d.replace('|', '/')} |")
    bad = [r for r in results if r[1] in ("disagree", "crash")]
    lines += ["", "## Disagreements and crashes", ""]
    if not bad:
        lines.append("None.")
    for s, v, d, op_list, repro in bad:
        lines.append(f"- seed {s} ({v}; ops {' '.join(op_list)}): {d}  \n  reproducer: `{repro}`")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
