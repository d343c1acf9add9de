#!/usr/bin/env python3
"""memplan's transformer (and CNN) training memory beside PyTorch's measured peaks: no GPU needed.

For each samples/transformers/NAME.train.onnx, at the shapes bench/torch_transformer_peaks.py measured (text:
batch 8, seq 256; vision: batch 32, 224x224; optimizer none, MSE loss against a random target), runs
`memplan plan --train --json --strategy none --optimizer none` three ways: fused (the default), --no-fuse,
and --pytorch-attention eager. The CNN rows do the same for samples/models/{resnet18,resnet50,mobilenet_v2,
vgg16}.train.onnx at batch 32 against bench/pytorch_yardstick.py's measurements (resnet50 and mobilenet_v2
only; the others have no PyTorch measurement and show memplan's figures alone).

Like with like. PyTorch's figures (torch.cuda.max_memory_allocated) count everything in its caching
allocator: weights and buffers, the input batch, the target, gradients, activations, temporaries, and what the
CUDA libraries keep there (cuBLAS/cuDNN workspaces: `other_persistent_bytes`, hundreds of MiB for the text
models). memplan's peak_bytes = persistent (weights, optimizer state) + graph inputs (the batch and the
target) + the activation arena (activations, gradients, temporaries); its pytorch_peak_bytes is the same
accounting replayed the way PyTorch's allocator frees (planner/pytorch/eager_model.hpp). Neither models library
workspaces. So the measured figure compared here is

    measured_bytes = max_allocated_bytes - other_persistent_bytes
                   = weights + buffers + input + target (+ optimizer state) + peak_over_baseline_bytes

(other_persistent_bytes is ~65 MiB of library workspaces plus exactly one output-sized block: the previous
step's 0-dim loss, which torch_transformer_peaks.py keeps and whose storage PyTorch's mse_loss allocates at the
output's full size, pytorch/pytorch#185647; the step's own loss storage is in the step's peak and in
pytorch_peak_bytes. For the CNN yardstick, other_persistent = baseline_bytes - weights_bytes - input_bytes - target_bytes, its
weights_bytes counting buffers too). The raw max_allocated_bytes is kept in the JSON.

Columns: keep-all = memplan's own plan (strategy none, fused) / PyTorch SDPA measured; predicted SDPA and
eager = pytorch_peak_bytes with --pytorch-attention sdpa / eager against the measured SDPA / eager run
(error in %). eager_peak_bytes (an eager allocator running memplan's fused plan) is in the JSON too.

usage: transformer_memory.py [--memplan build/memplan] [--samples samples] [--only NAME,...] [--json PATH]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_TRANSFORMERS = os.path.join(HERE, "results", "torch_transformer_peaks_h100_2026-11-23.json")
TORCH_CNNS = os.path.join(HERE, "results", "pytorch_yardstick_h100_2026-11-23.json")
TRANSFORMERS = ["bert_small", "gpt2_small", "llama_gqa", "qwen2_gqa", "phi_small", "t5_encoder", "deit_tiny", "swin_tiny"]
CNNS = ["resnet18", "resnet50", "mobilenet_v2", "vgg16"]
CNN_BATCH = 32  # pytorch_yardstick.py's training batch
MiB = 2**20


def memplan_plan(memplan, model, dims, extra):
    cmd = [memplan, "plan", model, "--train", "--json", "--strategy", "none", "--optimizer", "none", "--pytorch-workspace", "0"]
    for k, v in dims.items():
        cmd += ["--dim", f"{k}={v}"]
    r = subprocess.run(cmd + extra, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip()[-400:]}
    j = json.loads(r.stdout)
    j["fusion"]["groups"] = len(j["fusion"]["groups"])  # the count: member lists would swamp the results file
    return j


def memplan_runs(memplan, model, dims):
    # the sample exports write eager attention: the SDPA run's prediction takes every attention as SDPA
    return {"fused": memplan_plan(memplan, model, dims, ["--pytorch-attention", "sdpa"]),
            "no_fuse": memplan_plan(memplan, model, dims, ["--no-fuse"]),
            "pytorch_eager_attention": memplan_plan(memplan, model, dims, ["--pytorch-attention", "eager"])}


def transformer_measured(run):
    """PyTorch's bytes as memplan counts them (see the module doc), from torch_transformer_peaks.py's run."""
    return {"measured_bytes": run["max_allocated_bytes"] - run["other_persistent_bytes"],
            "max_allocated_bytes": run["max_allocated_bytes"], "other_persistent_bytes": run["other_persistent_bytes"]}


def cnn_measured(t):
    other = t["baseline_bytes"] - t["weights_bytes"] - t["input_bytes"] - t["target_bytes"]
    return {"measured_bytes": t["peak_bytes"] - other, "max_allocated_bytes": t["peak_bytes"], "other_persistent_bytes": other}


def err(pred, meas):
    return None if not pred or not meas else 100.0 * (pred - meas) / meas


def sdpa_ran_eager(sdpa_run, eager_run):
    """True when PyTorch's SDPA and eager runs of a transformers model are the same computation: the same loss to the
    last bit and the same peak (the model's attention code has no SDPA path in that transformers version, so asking
    for attn_implementation="sdpa" ran eager attention; SDPA's kernels and eager's softmax chain round differently
    and draw dropout differently, so genuinely different runs do not agree bit for bit)."""
    return (sdpa_run.get("loss") is not None and sdpa_run.get("loss") == eager_run.get("loss")
            and sdpa_run["max_allocated_bytes"] == eager_run["max_allocated_bytes"])


def row(name, family, dims, runs, sdpa, eager, ran_eager=False):
    f, n, e = runs["fused"], runs["no_fuse"], runs["pytorch_eager_attention"]
    ok = all("error" not in x for x in (f, n, e))
    out = {"model": name, "family": family, "dims": dims, "memplan": runs, "pytorch_sdpa": sdpa, "pytorch_eager": eager,
           "pytorch_sdpa_ran_eager_attention": ran_eager}
    if ok:
        out.update({
            "keep_all_peak_bytes": f["peak_bytes"], "keep_all_no_fuse_peak_bytes": n["peak_bytes"],
            "fusion_groups": f["fusion"]["groups"], "fusion_by_kind": f["fusion"]["by_kind"],
            "predicted_sdpa_bytes": f["pytorch_peak_bytes"], "predicted_eager_bytes": e["pytorch_peak_bytes"],
            "keep_all_over_sdpa_measured": f["peak_bytes"] / sdpa["measured_bytes"] if sdpa else None,
            # No SDPA measurement to hold the SDPA prediction against when PyTorch ran eager attention for both.
            "predicted_sdpa_error_pct": None if ran_eager else err(f["pytorch_peak_bytes"], sdpa and sdpa["measured_bytes"]),
            "predicted_eager_error_pct": err(e["pytorch_peak_bytes"], eager and eager["measured_bytes"]),
        })
    return out


def fmt(x, pattern):
    return "-" if x is None else pattern.format(x)


def print_table(rows):
    print(f"{'model':13} {'shape':10} {'keep-all':>9} {'no-fuse':>9} {'groups':>6} {'PT sdpa':>9} {'ratio':>6} "
          f"{'pred sdpa':>9} {'err':>7} {'PT eager':>9} {'pred eager':>10} {'err':>7}   (MiB; measured = max_allocated - library workspaces)")
    for r in rows:
        shape = "x".join(str(v) for v in r["dims"].values())
        if "keep_all_peak_bytes" not in r:
            bad = next(v["error"] for v in r["memplan"].values() if "error" in v)
            print(f"{r['model']:13} {shape:10} memplan failed: {bad.splitlines()[-1][:120]}")
            continue
        s, e = r["pytorch_sdpa"], r["pytorch_eager"]
        print(f"{r['model']:13} {shape:10} {r['keep_all_peak_bytes']/MiB:9.1f} {r['keep_all_no_fuse_peak_bytes']/MiB:9.1f} "
              f"{r['fusion_groups']:6d} {fmt(s and s['measured_bytes']/MiB, '{:9.1f}'):>9} {fmt(r['keep_all_over_sdpa_measured'], '{:6.3f}'):>6} "
              f"{r['predicted_sdpa_bytes']/MiB:9.1f} {'eager*' if r['pytorch_sdpa_ran_eager_attention'] else fmt(r['predicted_sdpa_error_pct'], '{:+6.1f}%'):>7} "
              f"{fmt(e and e['measured_bytes']/MiB, '{:9.1f}'):>9} {r['predicted_eager_bytes']/MiB:10.1f} "
              f"{fmt(r['predicted_eager_error_pct'], '{:+6.1f}%'):>7}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memplan", default="build/memplan")
    ap.add_argument("--samples", default="samples")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--json", default="", help="write the rows here")
    ap.add_argument("--torch-peaks", default=TORCH_TRANSFORMERS,
                    help="bench/torch_transformer_peaks.py's JSON to compare with (its models are the rows; default: the "
                         "sample set measured 2026-11-23)")
    ap.add_argument("--models-dir", default="", help="where NAME.train.onnx lies (default: SAMPLES/transformers); e.g. "
                    "held-out exports of bench/export_transformers.py")
    ap.add_argument("--no-cnns", action="store_true", help="transformer rows only")
    a = ap.parse_args()
    only = {x for x in a.only.split(",") if x}
    torch_t = json.load(open(a.torch_peaks))
    models_dir = a.models_dir or os.path.join(a.samples, "transformers")
    torch_c = json.load(open(TORCH_CNNS))
    rows = []
    for name in (TRANSFORMERS if a.torch_peaks == TORCH_TRANSFORMERS else list(torch_t["models"])):
        if only and name not in only:
            continue
        m = torch_t["models"][name]
        sdpa, eager = m["sdpa"], m["eager"]
        shape = sdpa["input_shape"]  # [batch, seq] or [batch, 3, H, W]
        dims = {"batch": shape[0]} if m["family"] == "vision" else {"batch": shape[0], "seq": shape[1]}
        runs = memplan_runs(a.memplan, os.path.join(models_dir, f"{name}.train.onnx"), dims)
        rows.append(row(name, m["family"], dims, runs, transformer_measured(sdpa), transformer_measured(eager),
                        sdpa_ran_eager(sdpa, eager)))
        print(f"  {name} done", file=sys.stderr)
    for name in [] if a.no_cnns else CNNS:
        if only and name not in only:
            continue
        t = next((x for x in torch_c["training"] if x["model"] == name and not x["segments"]), None)
        dims = {"batch": t["batch"] if t else CNN_BATCH}
        runs = memplan_runs(a.memplan, os.path.join(a.samples, "models", f"{name}.train.onnx"), dims)
        meas = cnn_measured(t) if t else None
        rows.append(row(name, "cnn", dims, runs, meas, meas))  # no attention: one measurement serves both columns
        print(f"  {name} done", file=sys.stderr)
    print(f"memplan beside PyTorch ({torch_t['device']}, torch {torch_t['torch']}, float32, optimizer none); "
          f"transformers measured {torch_t['date']}, CNNs {torch_c['date']}")
    print_table(rows)
    if any(r.get("pytorch_sdpa_ran_eager_attention") for r in rows):
        print("eager*: PyTorch's SDPA and eager runs were the same computation (same loss bit for bit, same peak): the "
              "model's attention code has no SDPA path in that transformers version, so there is no SDPA measurement "
              "for the SDPA prediction; its eager prediction is held against the run")
    doc = {"torch_transformers": os.path.relpath(a.torch_peaks, HERE), "models_dir": models_dir, "torch_cnns": os.path.relpath(TORCH_CNNS, HERE),
           "measured_bytes": "max_allocated_bytes - other_persistent_bytes (library workspaces)", "rows": rows}
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(doc, fh, indent=1, sort_keys=True)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
