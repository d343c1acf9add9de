#!/usr/bin/env python3
"""PyTorch yardstick for `bench_attention`: torch.nn.functional.scaled_dot_product_attention (its default backend
choice) in exact float32 (TF32 off for matmul and cuDNN) at the same shapes, forward and forward+backward, median of
cudaEvent-timed runs after warm-up. Prints one JSON object in bench_attention's form.

usage: torch_sdpa_bench.py [B H D [S,S,...]]   (default 8 8 64 256,1024; each shape non-causal and causal)
"""
import json
import math
import sys

import torch
import torch.nn.functional as F


def timed(fn, runs=20, warmup=3):
    times = []
    for r in range(runs + warmup):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        if r >= warmup:
            times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def bench_shape(b, h, s, d, causal):
    gen = torch.Generator(device="cuda").manual_seed(3)
    shape = (b, h, s, d)
    q, k, v, do = (torch.rand(shape, device="cuda", generator=gen) * 2 - 1 for _ in range(4))
    q.requires_grad_(True)
    k.requires_grad_(True)
    v.requires_grad_(True)
    scale = 1.0 / math.sqrt(d)

    def forward():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

    def forward_backward():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        q.grad = k.grad = v.grad = None
        o.backward(do)

    fwd, fwd_bwd = timed(forward), timed(forward_backward)
    flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    return {
        "b": b, "h": h, "s": s, "d": d, "causal": causal,
        "forward_ms": fwd, "forward_backward_ms": fwd_bwd,
        "forward_tflops": flops / (fwd * 1e-3) / 1e12,
        "forward_backward_tflops": 3.5 * flops / (fwd_bwd * 1e-3) / 1e12,
    }


def main():
    if not torch.cuda.is_available():
        print("torch_sdpa_bench: no CUDA device", file=sys.stderr)
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    b, h, d, lengths = 8, 8, 64, [256, 1024]
    if len(sys.argv) > 1:
        if len(sys.argv) < 4:
            print(__doc__, file=sys.stderr)
            return 2
        b, h, d = (int(x) for x in sys.argv[1:4])
        if len(sys.argv) > 4:
            lengths = [int(x) for x in sys.argv[4].split(",")]
    results = [bench_shape(b, h, s, d, causal) for s in lengths for causal in (False, True)]
    print(json.dumps({"impl": f"torch {torch.__version__} scaled_dot_product_attention (float32, TF32 off)",
                      "device": torch.cuda.get_device_name(0), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
