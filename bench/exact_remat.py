#!/usr/bin/env python3
"""Strategy `exact` (keep / swap / recompute per stage as a MILP through CBC, least estimated seconds, used where its
estimated step is faster) against `optimal` (the segment DP, least recompute FLOPs) and `auto` (the default under a
budget) on the sample training models and deep generated GPTs (bench/make_gpt.py: 24 and 128 layers, 57 and 265
stages): estimated step, recompute FLOPs and plan time at two budgets between the least peak `optimal` reaches and
keep-all's peak (30% and 70% of the way), with the MILP's stages, solves, status, model costs, bound and gaps.

Usage: bench/exact_remat.py [--memplan build/memplan] [--out bench/results/exact_remat_2026-11-24] [--models a,b]
Each budget is least + SHARE x (keep-all - least), totals with library bytes 0. Plans are made with --schedule file
and --exact-pack-seconds 0 (one order, greedy packers: the comparison of the strategies, at half the time).
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
    ("GEN:gpt24.onnx:--layers 24 --d 256 --heads 4 --seq 128 --batch 8 --out-dim 256", ""),
    ("GEN:gpt128.onnx:--layers 128 --d 128 --heads 4 --seq 128 --batch 8 --out-dim 128", ""),
]
STRATEGIES = ("optimal", "exact", "auto")
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
    ap.add_argument("--out", default="bench/results/exact_remat_2026-11-24")
    ap.add_argument("--gen-dir", default="/tmp/memplan_exact_remat", help="where the generated GPTs are written")
    ap.add_argument("--memory-order", action="store_true")
    ap.add_argument("--models", default="", help="comma-separated substrings: only these models")
    a = ap.parse_args()
    common = ["--exact-pack-seconds", "0", "--schedule", "memory" if a.memory_order else "file"]
    rows = []
    models = [m for m in MODELS if not a.models or any(s in m[0] for s in a.models.split(","))]
    os.makedirs(a.gen_dir, exist_ok=True)
    for model, dims in models:
        if model.startswith("GEN:"):
            _, name, args = model.split(":", 2)
            model = os.path.join(a.gen_dir, name)
            subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "make_gpt.py"), model] + args.split(), check=True)
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
            for strategy in STRATEGIES:
                j, err, wall = plan(a.memplan, model, dims, common + ["--strategy", strategy, "--budget", str(budget)])
                row[strategy] = {"error": err, "wall_s": wall} if not j else {
                    "recompute_flops": j["recompute_flops"], "plan_seconds": j["plan_seconds"], "wall_s": wall, "peak_bytes": j["peak_bytes"],
                    "step_seconds": j["estimated_step_seconds"], "swap_bytes": j["swap_bytes"], "exact_remat": j.get("exact_remat")}
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(a.out + ".json", "w") as f:
        json.dump({"schedule": common[-1], "rows": rows}, f, indent=1)
    def ms(x):
        return "-" if x is None else f"{1e3 * x:.3f}"

    def cell(r, k):
        x = r[k]
        if "error" in x:
            return "infeasible | - | -"
        return f"{ms(x['step_seconds'])} | {gf(x['recompute_flops'])} | {x['plan_seconds']:.2f}"

    lines = ["| model | budget (share) | optimal step ms / GFLOP / plan s | exact step ms / GFLOP / plan s | auto step ms / GFLOP / plan s | "
             "stages (can swap) | solves | columns | MILP s | status | DP model ms | MILP model ms | bound ms | DP gap | MILP gap | swapped | "
             "exact used |", "|" + "---|" * 17]
    for r in rows:
        x = r["exact"].get("exact_remat") or {}
        lines.append("| {} {} | {:.0f}% | {} | {} | {} | {} ({}) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            r["model"], r["dims"], 100 * r["share"], cell(r, "optimal"), cell(r, "exact"), cell(r, "auto"), x.get("stages", "-"),
            x.get("swappable_stages", "-"), x.get("solves", "-"), x.get("variables", "-"),
            f"{x['seconds']:.2f}" if "seconds" in x else "-", x.get("status", "-"), ms(x.get("dp_model_seconds")),
            ms(x.get("milp_model_seconds")), ms(x.get("lower_bound_model_seconds")), f"{100 * x['gap']:.1f}%" if "gap" in x else "-",
            f"{100 * x['milp_gap']:.2f}%" if "milp_gap" in x else "-", x.get("swapped_stages", "-"), x.get("used", "-")))
    with open(a.out + ".table.md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
