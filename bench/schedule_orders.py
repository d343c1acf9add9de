#!/usr/bin/env python3
"""File order vs memory order (the default) per sample training graph, for strategy none and a remat strategy under a budget.

For each training model of bench/planner_optimality.py: `memplan plan --train` with strategy none (no budget) and with
`--strategy STRATEGY --budget B` (B halfway between that strategy's least peak and none's peak, both in file order),
each with `--schedule file` and `--schedule memory`. Prints a markdown table (peaks, recompute, the order kept,
plan_seconds and wall time); --json FILE writes the rows.
Usage: bench/schedule_orders.py [--memplan build/memplan] [--strategy optimal] [--json out.json]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from planner_optimality import ROOT, TRAINING, mib, run  # noqa: E402


def plan(memplan, model, dims, *extra):
    j, err = run(memplan, "plan", model, dims, ["--train", "--library-bytes", "0"] + list(extra))
    if err:
        raise SystemExit("%s %s: %s" % (model, " ".join(extra), err))
    return j


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    ap.add_argument("--strategy", default="optimal")
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    print("| model | dims | strategy | budget MiB | file peak MiB | memory peak MiB | change | order kept | file recompute GFLOP "
          "| memory recompute GFLOP | file plan s | memory plan s | file wall s | memory wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model, dims in TRAINING:
        none_file = plan(a.memplan, model, dims, "--strategy", "none", "--schedule", "file")
        least = plan(a.memplan, model, dims, "--strategy", a.strategy, "--schedule", "file")
        budget = least["peak_bytes"] + (none_file["peak_bytes"] - least["peak_bytes"]) // 2
        cases = [("none", None, none_file, plan(a.memplan, model, dims, "--strategy", "none", "--schedule", "memory"))]
        if least["peak_bytes"] < none_file["peak_bytes"]:
            b = ["--strategy", a.strategy, "--budget", str(budget)]
            cases.append((a.strategy, budget, plan(a.memplan, model, dims, *b, "--schedule", "file"),
                          plan(a.memplan, model, dims, *b, "--schedule", "memory")))
        for strategy, bud, f, m in cases:
            row = {"model": os.path.basename(model), "dims": dims, "strategy": strategy, "budget": bud,
                   "file_peak": f["peak_bytes"], "memory_peak": m["peak_bytes"], "method": m["schedule"]["method"],
                   "file_recompute": f.get("recompute_flops", 0.0), "memory_recompute": m.get("recompute_flops", 0.0),
                   "file_plan_seconds": f["plan_seconds"], "memory_plan_seconds": m["plan_seconds"],
                   "file_wall": f["wall_seconds"], "memory_wall": m["wall_seconds"]}
            rows.append(row)
            print("| %s | %s | %s | %s | %.1f | %.1f | %+.1f%% | %s | %.3f | %.3f | %.2f | %.2f | %.1f | %.1f |" % (
                row["model"], dims, strategy, "%.1f" % mib(bud) if bud else "-", mib(row["file_peak"]), mib(row["memory_peak"]),
                100.0 * (row["memory_peak"] - row["file_peak"]) / row["file_peak"], row["method"], row["file_recompute"] / 1e9,
                row["memory_recompute"] / 1e9, row["file_plan_seconds"], row["memory_plan_seconds"], row["file_wall"],
                row["memory_wall"]), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
