#!/usr/bin/env python3
"""Strategy `exact` (the stage-chain MILP through GLPK, used where it recomputes less) against `optimal` (the segment
DP) on the sample training models: recompute FLOPs and plan time at two budgets between the least peak `optimal`
reaches and keep-all's peak (30% and 70% of the way), with the MILP's stages, status and the DP's gap.

Usage: bench/exact_remat.py [--memplan build/memplan] [--out bench/results/exact_remat_2026-11-26] [--quick]
Each budget is least + SHARE x (keep-all - least), totals with library bytes 0 (50% of keep-all's arena is below
what any strategy reaches on the CNNs). Plans are made with
--schedule file and --exact-pack-seconds 0 (one order, greedy packers: the comparison of the two strategies, at half
the time); add --memory-order for the default schedule.
"""
import argparse
import json
import os
import subprocess
import sys
import time

MODELS = [
    ("samples/models/resnet18.train.onnx", "batch=8"), ("samples/models/resnet50.train.onnx", "batch=4"),
    ("samples/models/mobilenet_v2.train.onnx", "batch=8"), ("samples/models/vgg16.train.onnx", "batch=4"),
    ("samples/models/densenet121.train.onnx", "batch=4"),
    ("samples/transformers/bert_small.train.onnx", "batch=4,seq=128"), ("samples/transformers/gpt2_small.train.onnx", "batch=4,seq=128"),
    ("samples/transformers/llama_gqa.train.onnx", "batch=4,seq=128"), ("samples/transformers/qwen2_gqa.train.onnx", "batch=4,seq=128"),
    ("samples/transformers/phi_small.train.onnx", "batch=4,seq=128"), ("samples/transformers/t5_encoder.train.onnx", "batch=4,seq=128"),
    ("samples/transformers/deit_tiny.train.onnx", "batch=8"), ("samples/transformers/swin_tiny.train.onnx", "batch=4"),
]
SHARES = [0.3, 0.7]


def plan(memplan, model, dims, extra):
    cmd = [memplan, "plan", model, "--train", "--json", "--library-bytes", "0"] + extra
    for d in filter(None, dims.split(",")):
        cmd += ["--dim", d]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}", wall
    return json.loads(p.stdout), None, wall


def gf(x):
    return "-" if x is None else f"{x / 1e9:.3f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default="build/memplan")
    ap.add_argument("--out", default="bench/results/exact_remat_2026-11-26")
    ap.add_argument("--memory-order", action="store_true")
    ap.add_argument("--models", default="", help="comma-separated substrings: only these models")
    a = ap.parse_args()
    common = ["--exact-pack-seconds", "0", "--schedule", "memory" if a.memory_order else "file"]
    rows = []
    models = [m for m in MODELS if not a.models or any(s in m[0] for s in a.models.split(","))]
    for model, dims in models:
        none, err, _ = plan(a.memplan, model, dims, common + ["--strategy", "none"])
        if not none:
            print(f"{model}: keep-all failed: {err}", file=sys.stderr)
            continue
        least, err, _ = plan(a.memplan, model, dims, common + ["--strategy", "optimal"])
        if not least:
            print(f"{model}: optimal's least memory failed: {err}", file=sys.stderr)
            continue
        for share in SHARES:
            budget = least["peak_bytes"] + int(share * (none["peak_bytes"] - least["peak_bytes"]))
            row = {"model": os.path.basename(model), "dims": dims, "ops": none["ops"], "share": share, "budget_bytes": budget,
                   "keep_all_peak_bytes": none["peak_bytes"], "least_peak_bytes": least["peak_bytes"], "training_flops": none["training_flops"]}
            for strategy in ("optimal", "exact"):
                j, err, wall = plan(a.memplan, model, dims, common + ["--strategy", strategy, "--budget", str(budget)])
                row[strategy] = {"error": err, "wall_s": wall} if not j else {
                    "recompute_flops": j["recompute_flops"], "plan_seconds": j["plan_seconds"], "wall_s": wall, "peak_bytes": j["peak_bytes"],
                    "exact_remat": j.get("exact_remat")}
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(a.out + ".json", "w") as f:
        json.dump({"schedule": common[-1], "rows": rows}, f, indent=1)
    lines = ["| model | dims | budget (share least->keep-all) | optimal GFLOP | optimal s | exact GFLOP | exact s | stages | solves | MILP status | "
             "DP model GFLOP | MILP model GFLOP | bound GFLOP | DP gap | MILP used |", "|" + "---|" * 15]
    for r in rows:
        o, e = r["optimal"], r["exact"]
        x = e.get("exact_remat") or {}
        lines.append("| {} | {} | {:.0f}% | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            r["model"], r["dims"], 100 * r["share"], gf(o.get("recompute_flops")) if "error" not in o else "infeasible",
            f"{o['plan_seconds']:.2f}" if "plan_seconds" in o else "-", gf(e.get("recompute_flops")) if "error" not in e else "infeasible",
            f"{e['plan_seconds']:.2f}" if "plan_seconds" in e else "-", x.get("stages", "-"), x.get("solves", "-"), x.get("status", "-"),
            gf(x.get("dp_flops")), gf(x.get("milp_flops")), gf(x.get("lower_bound_flops")),
            f"{100 * x['gap']:.1f}%" if "gap" in x else "-", x.get("used", "-")))
    with open(a.out + ".table.md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
