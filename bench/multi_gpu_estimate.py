#!/usr/bin/env python3
"""memplan_torch.estimate_step(parallel=...) for every PyTorch configuration bench/multi_gpu.py measured, held
against the measured per-rank figures: the steady-state step (memory_allocated before it, its peak allocated) and
the whole run's max_memory_allocated (the first steps create AdamW's state; DDP rebuilds its buckets in the second).

    python3 bench/multi_gpu_estimate.py bench/results/multi_gpu_2026-11-28/multi_gpu_2gpu.json [...] \\
        --out bench/results/multi_gpu_2026-11-28/estimate.json --md bench/results/multi_gpu_2026-11-28/estimate.md \\
        [--memplan build/memplan --onnx-dir DIR]

The same models (built on the meta device), the same loss on fp32 logits, batch and sequence from the file; no GPU.
With --memplan, also the ONNX route: `memplan plan MODEL.train.onnx --train --gpus N --zero K` (its pytorch roles)
on DIR/gpt2.train.onnx and DIR/llama.train.onnx (bench/multi_gpu.py's export_onnx; exported when missing), whose
loop holds the model's output as the measured one does (--pytorch-outputs held, the default).
"""
import argparse
import json
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

MIB = 1 << 20


def build(name):
    import torch
    import transformers

    from multi_gpu import GPT2, LLAMA

    spec = GPT2 if name == "gpt2" else LLAMA
    config = getattr(transformers, spec["config"])(**spec["kwargs"])
    with torch.device("meta"):
        model = getattr(transformers, spec["cls"])._from_config(config, attn_implementation="sdpa")
    return model, spec["vocab"]


KEPT = {}  # the step's logits, alive until the optimizer step ends, as the measured step() holds them


def step_module(model, vocab):
    """The measured step's forward and loss in one module: logits, their fp32 copy, cross-entropy; the logits are
    kept (KEPT) until the optimizer's step ends, as bench/multi_gpu.py's step() holds them."""
    import torch
    import torch.nn.functional as F

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids, labels):
            logits = self.model(input_ids=ids, use_cache=False).logits
            KEPT["logits"] = logits
            return F.cross_entropy(logits.float().reshape(-1, vocab), labels.reshape(-1))

    return Step()


def blocks(step, name):
    return step.model.transformer.h if name == "gpt2" else step.model.model.layers


def estimate(row, gpu):
    import torch

    import memplan_torch

    model, vocab = build(row["model"])
    step = step_module(model, vocab)
    ids = torch.randint(0, vocab, (row["batch_per_gpu"], row["seq"]))
    labels = torch.randint(0, vocab, (row["batch_per_gpu"], row["seq"]))
    par = memplan_torch.DataParallel(row["wrap"], row["world_size"], shard=lambda s: blocks(s, row["model"]))
    t0 = time.time()
    from torch.optim.optimizer import register_optimizer_step_post_hook

    hook = register_optimizer_step_post_hook(lambda *a: KEPT.clear())
    try:
        r = memplan_torch.estimate_step(step, (ids, labels), loss_fn=lambda loss: loss,
                                        optimizer=lambda ps: torch.optim.AdamW(ps, lr=1e-4),
                                        autocast_dtype=torch.bfloat16 if row["precision"] == "bf16" else None,
                                        gpu=gpu, steps=3, parallel=par)
    finally:
        hook.remove()
        KEPT.clear()
    return r, time.time() - t0


def compare(row, est):
    by_rank = {e["rank"]: e for e in est["ranks"]}
    out = []
    for m in row["per_rank"]:
        if "error" in m:
            continue
        e = by_rank.get(m["rank"], by_rank.get(0))  # DDP and FSDP2 ranks allocate alike: rank 0 stands for all
        pairs = dict(before=(e["before_forward_bytes"], m["step_before_bytes"]),
                     step_peak=(e["peak_allocated_bytes"], m["step_peak_allocated_bytes"]),
                     run_peak=(e["run_peak_allocated_bytes"], m["peak_allocated_bytes"]),
                     step_reserved=(e["peak_reserved_bytes"], m["step_peak_reserved_bytes"]))
        out.append(dict(rank=m["rank"], **{k: dict(estimate=a, measured=b, error=(a - b) / b) for k, (a, b) in pairs.items()}))
    return out


def memplan_route(row, memplan, onnx_dir):
    """`memplan plan --gpus N --zero K` on the export: PyTorch's per-rank peaks as the ONNX route predicts them."""
    import subprocess

    from multi_gpu import export_onnx

    path = os.path.join(onnx_dir, f"{row['model']}.train.onnx")
    if not os.path.exists(path):
        export_onnx(row["model"], False, path)
    zero = {"ddp": "0", "zero1": "1", "fsdp2": "3"}[row["wrap"]]
    cmd = [memplan, "plan", path, "--train", "--optimizer", "adamw", "--loss", "ce", "--precision", row["precision"],
           "--dim", f"batch={row['batch_per_gpu']}", "--dim", f"seq={row['seq']}", "--gpus", str(row["world_size"]),
           "--zero", zero, "--json"]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return dict(error=p.stderr.strip()[-500:], command=" ".join(cmd[1:]))
    out = json.loads(p.stdout)["pytorch"]
    out["command"], out["seconds"] = " ".join(cmd[1:]), time.time() - t0
    return out


def markdown_memplan(rows):
    lines = ["", "## The ONNX route: `memplan plan --gpus N --zero K`", "",
             "Its `pytorch` roles' steady-step peak against the measured one (the loop holds the logits, as the route "
             "assumes by default) and estimate_step's. MiB.", "",
             "| GPUs | model | precision | layout | rank | measured | estimate_step | memplan plan | memplan / measured |",
             "|---:|---|---|---|---:|---:|---:|---:|---:|"]
    errs = []
    for r in rows:
        m = r.get("memplan")
        if not m or "error" in m:
            lines.append(f"| {r['world_size']} | {r['model']} | {r['precision']} | {r['wrap']} | | | | error | |")
            continue
        for c in r["ranks"]:
            role = next(x for x in m["roles"] if c["rank"] in x["ranks"])
            ref = c["step_peak"]["measured"]
            pred = role["pytorch_step_peak_bytes"]
            errs.append(pred / ref - 1)
            lines.append(f"| {r['world_size']} | {r['model']} | {r['precision']} | {r['wrap']} | {c['rank']} | "
                         f"{ref / MIB:.0f} | {c['step_peak']['estimate'] / MIB:.0f} | {pred / MIB:.0f} | {100 * (pred / ref - 1):+.1f}% |")
    if errs:
        lines += ["", f"{len(errs)} ranks: memplan plan within 5% of the measured peak on {sum(abs(e) <= 0.05 for e in errs)}, "
                      f"within 10% on {sum(abs(e) <= 0.10 for e in errs)}, worst {100 * max(errs, key=abs):+.1f}%."]
    return "\n".join(lines) + "\n"


def markdown(rows, device):
    lines = [f"PyTorch measured on {device}; estimate_step on this machine without a GPU. MiB; error = estimate / measured - 1.",
             "",
             "| GPUs | model | precision | layout | rank | before step (meas / est) | step peak (meas / est, err) | run peak (meas / est, err) | reserved (meas / est, err) |",
             "|---:|---|---|---|---:|---|---|---|---|"]
    for r in rows:
        for c in r["ranks"]:
            def cell(k, err=True):
                v = c[k]
                s = f"{v['measured'] / MIB:.0f} / {v['estimate'] / MIB:.0f}"
                return s + (f", {100 * v['error']:+.1f}%" if err else "")
            lines.append(f"| {r['world_size']} | {r['model']} | {r['precision']} | {r['wrap']} | {c['rank']} | "
                         f"{cell('before')} | {cell('step_peak')} | {cell('run_peak')} | {cell('step_reserved')} |")
    errs = [abs(c[k]["error"]) for r in rows for c in r["ranks"] for k in ("step_peak", "run_peak")]
    if errs:
        lines += ["", f"{len(errs)} rank peaks (steady-state step and whole run): {sum(e <= 0.05 for e in errs)} within 5%, "
                      f"{sum(e <= 0.10 for e in errs)} within 10%, worst {100 * max(errs):.1f}%."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("measured", nargs="+", help="multi_gpu.py JSON files")
    ap.add_argument("--out", required=True)
    ap.add_argument("--md", default="")
    ap.add_argument("--memplan", default="", help="also the ONNX route's per-rank prediction (memplan plan --gpus)")
    ap.add_argument("--onnx-dir", default="/tmp/multi_gpu_onnx")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import torch
    import transformers

    rows, devices = [], set()
    for path in args.measured:
        data = json.load(open(path))
        devices.add(f"{data.get('gpus')} x {data.get('device')}")
        for row in data["torch"]:
            gpu = "h200" if "H200" in str(data.get("device")) else "h100"
            est, seconds = estimate(row, gpu)
            ranks = compare(row, est)
            rows.append(dict(model=row["model"], precision=row["precision"], wrap=row["wrap"], world_size=row["world_size"],
                             measured_file=os.path.relpath(path, os.path.dirname(HERE)), estimate_seconds=seconds,
                             ranks=ranks, estimate={k: est[k] for k in ("ranks", "parallel", "notes", "sdpa_kernels")}))
            if args.memplan:
                os.makedirs(args.onnx_dir, exist_ok=True)
                rows[-1]["memplan"] = memplan_route(row, args.memplan, args.onnx_dir)
            print(row["world_size"], row["model"], row["precision"], row["wrap"], " ".join(
                f"r{c['rank']} step {100 * c['step_peak']['error']:+.1f}% run {100 * c['run_peak']['error']:+.1f}%" for c in ranks),
                f"({seconds:.0f} s)", flush=True)
    result = dict(date=time.strftime("%Y-%m-%d"), torch_version=torch.__version__, transformers_version=transformers.__version__,
                  measured_on=sorted(devices), estimated_on="the development VM (2-core AMD EPYC, no GPU)", rows=rows)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    if args.md:
        with open(args.md, "w") as f:
            f.write(markdown(rows, ", ".join(sorted(devices))) + (markdown_memplan(rows) if args.memplan else ""))


if __name__ == "__main__":
    sys.exit(main())
