#!/usr/bin/env python3
"""memplan beside PyTorch on real training recipes: reads bench/torch_recipes.py's JSON (measured on the GPU
machine) and, for every case, runs `memplan plan --train --json` on the same model's ONNX export with the same
optimizer, precision and loss; writes a markdown table and a JSON of both sides.

  measured   PyTorch's absolute peak of the whole step (max_memory_allocated, baseline included)
  predicted  memplan's pytorch_peak_bytes: what it says PyTorch reaches (goal: within 10%)
  planned    memplan's own peak_bytes (strategy none: keep everything; goal: <= measured)

usage: recipes_report.py TORCH_JSON OUT_PREFIX [--memplan build/memplan]
"""
import argparse
import json
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("torch_json")
    ap.add_argument("out_prefix")
    ap.add_argument("--memplan", default="build/memplan")
    args = ap.parse_args()
    report = json.load(open(args.torch_json))
    rows, out = [], []
    for c in report["cases"]:
        if "error" in c:
            rows.append(f"| {c['model']} | {c['optimizer']} | {c['precision']} | {c['loss']} | PyTorch failed: {c['error'][:60]} | | | | |")
            continue
        cmd = [args.memplan, "plan", c["onnx"], "--train", "--json", "--optimizer", c["optimizer"],
               "--optimizer-impl", c.get("optimizer_impl", "foreach"), "--precision", c["precision"],
               "--loss", c["loss"], "--strategy", "none"]
        for d in c["dims"]:
            cmd += ["--dim", d]
        p = subprocess.run(cmd, capture_output=True, text=True)
        entry = {"torch": c, "command": " ".join(cmd)}
        if p.returncode != 0:
            entry["memplan_error"] = p.stderr.strip()
            rows.append(f"| {c['model']} | {c['optimizer']} | {c['precision']} | {c['loss']} | "
                        f"{c['max_allocated_bytes'] / 2**20:.1f} | memplan failed: {p.stderr.strip()[:80]} | | | |")
            out.append(entry)
            continue
        m = json.loads(p.stdout)
        entry["memplan"] = {k: m.get(k) for k in ("peak_bytes", "pytorch_peak_bytes", "persistent_bytes", "input_bytes",
                                                   "activation_arena_bytes", "weights_bytes")}
        measured = c["max_allocated_bytes"]
        pred, planned = m["pytorch_peak_bytes"], m["peak_bytes"]
        entry["prediction_error"] = pred / measured - 1.0
        entry["planned_over_measured"] = planned / measured
        out.append(entry)
        rows.append(f"| {c['model']} | {c['optimizer']} | {c['precision']} | {c['loss']} | {measured / 2**20:.1f} | "
                    f"{pred / 2**20:.1f} | {100 * (pred / measured - 1):+.1f}% | {planned / 2**20:.1f} | "
                    f"{planned / measured:.2f} |")
    head = (f"Device {report['device']}, torch {report['torch']}, {report['date']}. Whole step: forward, loss, backward, "
            "optimizer.step(), zero_grad(set_to_none=True); peaks are absolute (weights, state, batch included).\n\n"
            "| model | optimizer | precision | loss | PyTorch MiB | predicted MiB | error | memplan planned MiB | planned / PyTorch |\n"
            "|---|---|---|---|---:|---:|---:|---:|---:|\n")
    open(args.out_prefix + ".md", "w").write(head + "\n".join(rows) + "\n")
    json.dump(out, open(args.out_prefix + ".json", "w"), indent=1)
    errs = [abs(e["prediction_error"]) for e in out if "prediction_error" in e]
    if errs:
        print(f"{len(errs)} cases, prediction within 10% on {sum(e <= 0.10 for e in errs)}, worst {100 * max(errs):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
