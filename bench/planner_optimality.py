#!/usr/bin/env python3
"""Planner optimality per sample model: live peak in file order vs memory order, arena vs lower bound vs exact.

Runs build/memplan (analyze for inference, plan --train for training) with --schedule file and memory, and
the memory plan again with --exact-pack-seconds 0 (greedy packers only). Prints a markdown table.
Usage: bench/planner_optimality.py [--memplan build/memplan] [--exact-seconds 2]
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INFERENCE = [
    ("samples/models/resnet18.dyn.onnx", "batch=32"), ("samples/models/resnet50.dyn.onnx", "batch=32"),
    ("samples/models/mobilenet_v2.dyn.onnx", "batch=32"), ("samples/models/vgg16.dyn.onnx", "batch=32"),
    ("samples/models/squeezenet1_1.onnx", ""), ("samples/models/bert_base.dyn.onnx", "batch=8,seq=128"),
    ("samples/models/distilbert.dyn.onnx", "batch=8,seq=128"), ("samples/transformers/bert_small.dynamo.onnx", "batch=8,seq=256"),
    ("samples/transformers/gpt2_small.dynamo.onnx", "batch=8,seq=256"), ("samples/transformers/llama_gqa.dynamo.onnx", "batch=8,seq=256"),
    ("samples/transformers/t5_encoder.dynamo.onnx", "batch=8,seq=256"), ("samples/transformers/deit_tiny.dynamo.onnx", "batch=32"),
    ("samples/transformers/phi_small.dynamo.onnx", "batch=8,seq=256"), ("samples/transformers/qwen2_gqa.dynamo.onnx", "batch=8,seq=256"),
]
TRAINING = [
    ("samples/models/resnet18.train.onnx", "batch=32"), ("samples/models/resnet50.train.onnx", "batch=16"),
    ("samples/models/mobilenet_v2.train.onnx", "batch=32"), ("samples/models/vgg16.train.onnx", "batch=8"),
    ("samples/transformers/bert_small.train.onnx", "batch=8,seq=256"), ("samples/transformers/gpt2_small.train.onnx", "batch=8,seq=256"),
    ("samples/transformers/llama_gqa.train.onnx", "batch=8,seq=256"), ("samples/transformers/t5_encoder.train.onnx", "batch=8,seq=256"),
    ("samples/transformers/deit_tiny.train.onnx", "batch=32"), ("samples/transformers/swin_tiny.train.onnx", "batch=16"),
]


def run(memplan, cmd, model, dims, extra):
    args = [memplan, cmd, os.path.join(ROOT, model), "--json"] + extra
    for d in filter(None, dims.split(",")):
        args += ["--dim", d]
    t0 = time.time()
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip().splitlines()[-1:] if out.stderr else ["exit %d" % out.returncode]
    j = json.loads(out.stdout)
    j["wall_seconds"] = time.time() - t0
    return j, None


def mib(b):
    return b / 1048576.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    ap.add_argument("--exact-seconds", default="2")
    a = ap.parse_args()
    rows = []
    for kind, models in (("inference", INFERENCE), ("training", TRAINING)):
        cmd, train = ("analyze", []) if kind == "inference" else ("plan", ["--train"])
        for model, dims in models:
            mem, err = run(a.memplan, cmd, model, dims, train + ["--schedule", "memory", "--exact-pack-seconds", a.exact_seconds])
            if err:
                print("%s %s: %s" % (kind, model, err), file=sys.stderr)
                continue
            greedy, _ = run(a.memplan, cmd, model, dims, train + ["--schedule", "memory", "--exact-pack-seconds", "0"])
            s = mem["schedule"]
            lb = mem.get("aliased_lower_bound_bytes", s["peak_bytes"])
            rows.append({
                "kind": kind, "model": os.path.basename(model), "dims": dims, "ops": mem["ops"],
                "file_peak": s["file_order_peak_bytes"], "memory_peak": s["peak_bytes"], "method": s["method"],
                "schedule_optimal": s["proven_optimal"], "schedule_seconds": s["seconds"],
                "lower_bound": lb, "greedy_arena": greedy["arena_bytes"] if greedy else None, "arena": mem["arena_bytes"],
                "arena_optimal": mem["arena_optimal"], "arena_gap": mem["arena_gap"], "plan_seconds": mem["plan_seconds"],
                "greedy_plan_seconds": greedy["plan_seconds"] if greedy else None,
            })
            r = rows[-1]
            print("| %s | %s | %s | %d | %.1f | %.1f | %+.1f%% | %s%s | %.3f | %.1f | %s | %.1f | %s | %.4f | %.2f | %s |" % (
                r["kind"], r["model"], r["dims"], r["ops"], mib(r["file_peak"]), mib(r["memory_peak"]),
                100.0 * (r["memory_peak"] - r["file_peak"]) / max(r["file_peak"], 1), r["method"],
                " (proven)" if r["schedule_optimal"] else "", r["schedule_seconds"], mib(r["lower_bound"]),
                "%.1f" % mib(r["greedy_arena"]) if r["greedy_arena"] is not None else "-", mib(r["arena"]),
                "yes" if r["arena_optimal"] else "no", r["arena_gap"], r["plan_seconds"],
                "%.2f" % r["greedy_plan_seconds"] if r["greedy_plan_seconds"] is not None else "-"), flush=True)
    json.dump(rows, open(os.path.join(ROOT, "bench", "results", "planner_optimality_2026-11-24.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
