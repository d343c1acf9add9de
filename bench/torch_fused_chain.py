#!/usr/bin/env python3
"""PyTorch yardstick for `bench_cuda fused`: the same two 8-op elementwise chains on one float32 tensor,
timed in torch eager (one kernel per op) and under torch.compile (Inductor fuses the chain into one kernel),
beside a plain device copy y.copy_(x), the bandwidth ceiling.

The chains are bench/bench_cuda.cpp's kTranscendental and kArithmetic, op for op and constant for constant:
  transcendental: x*1.5 -> +0.25 -> tanh -> *2 -> sigmoid -> -0.5 -> abs -> sqrt
  arithmetic:     x*1.5 -> +0.25 -> relu -> *2 -> min(.,3) -> -0.5 -> abs -> max(.,-1)
Bandwidths count what a fused kernel must move, as bench_cuda does: the input read once and the output
written once (2 * bytes per run), so eager's figure is an effective bandwidth (it moves 16 * bytes).
Times are medians of --runs runs, each timed with CUDA events after --warmup runs (torch.compile compiles
in the first). Prints one JSON object; --json PATH also writes it.

usage: torch_fused_chain.py [--bytes 268435456] [--runs 20] [--warmup 3] [--json PATH]
"""
import argparse
import json
import statistics
import sys

import torch


def transcendental(x):
    x = x * 1.5
    x = x + 0.25
    x = torch.tanh(x)
    x = x * 2.0
    x = torch.sigmoid(x)
    x = x - 0.5
    x = torch.abs(x)
    return torch.sqrt(x)


def arithmetic(x):
    x = x * 1.5
    x = x + 0.25
    x = torch.relu(x)
    x = x * 2.0
    x = torch.clamp_max(x, 3.0)   # Min with a scalar
    x = x - 0.5
    x = torch.abs(x)
    return torch.clamp_min(x, -1.0)  # Max with a scalar


def time_fn(fn, runs, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", type=int, default=256 << 20)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_fused_chain.py: CUDA is not available")
    n = args.bytes // 4
    torch.backends.cuda.matmul.allow_tf32 = False
    # bench_cuda's input: a deterministic ramp in [-1, 1)
    idx = torch.arange(n, dtype=torch.int64, device="cuda")
    x = ((idx * 2654435761) % 20011).to(torch.float32) * 1e-4 - 1.0
    y = torch.empty_like(x)
    moved = 2.0 * args.bytes
    copy_s = time_fn(lambda: y.copy_(x), args.runs, args.warmup)
    out = {
        "torch_version": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "tensor_bytes": args.bytes,
        "ops": 8,
        "copy_seconds": copy_s,
        "copy_bandwidth_bytes_per_s": moved / copy_s,
    }
    for name, chain in (("transcendental_chain", transcendental), ("arithmetic_chain", arithmetic)):
        compiled = torch.compile(chain, fullgraph=True)
        eager_s = time_fn(lambda: chain(x), args.runs, args.warmup)
        compiled_s = time_fn(lambda: compiled(x), args.runs, args.warmup)
        diff = (compiled(x) - chain(x)).abs().max().item()
        out[name] = {
            "eager_seconds": eager_s,
            "compiled_seconds": compiled_s,
            "eager_bandwidth_bytes_per_s": moved / eager_s,
            "compiled_bandwidth_bytes_per_s": moved / compiled_s,
            "eager_bandwidth_fraction": moved / eager_s / out["copy_bandwidth_bytes_per_s"],
            "compiled_bandwidth_fraction": moved / compiled_s / out["copy_bandwidth_bytes_per_s"],
            "max_abs_diff_compiled_vs_eager": diff,
        }
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
