#!/usr/bin/env python3
"""PyTorch yardstick for `bench_cuda infer`: inference of the transformer of bench/torch_train.py (the
network bench/make_gpt.py writes, and tiny_gpt's shape with --layers 4 --d 64 --heads 4 --seq 16 --batch 2
--out-dim 64) in exact float32, eager and through torch.compile (default mode, Inductor: fused Triton
kernels). Time is the median of cudaEvent-timed forward passes under torch.no_grad after warm-up; memory is
torch.cuda.max_memory_allocated during one pass over what is allocated before it. Prints one JSON object.

usage: torch_infer.py [--layers 8] [--d 512] [--heads 8] [--seq 256] [--batch 16] [--out-dim 512] [--runs 50]
"""
import json

import torch

from torch_train import setup


def measure(fn, x, runs):
    with torch.no_grad():
        for _ in range(5):
            fn(x)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn(x)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        times = []
        for _ in range(runs):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(x)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
    times.sort()
    return {"run_seconds": times[len(times) // 2], "run_seconds_min": times[0], "runs": runs,
            "peak_over_before_bytes": peak - before}


def main():
    a, dev, model = setup("runs", 50)
    model.eval()
    x = torch.rand(a.batch, a.seq, a.d, device=dev) * 2 - 1
    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "config": vars(a)}
    res["eager"] = measure(model, x, a.runs)
    try:
        res["compile"] = measure(torch.compile(model), x, a.runs)
    except Exception as e:  # Inductor needs a working Triton and compiler on the machine
        res["compile"] = {"error": str(e)[:500]}
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
