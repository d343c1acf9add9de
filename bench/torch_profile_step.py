#!/usr/bin/env python3
"""Where PyTorch's time goes in one eager training step of a bench/transformer_zoo.py model (CUDA, fp32, TF32 off,
SDPA attention, MSE loss, no optimizer): torch.profiler's CUDA kernels summed by name, the top ones printed as JSON.
Set beside `bench_cuda train MODEL ... profile=1` (memplan's seconds per op type) to see which kinds of work differ.
Usage: torch_profile_step.py MODEL [--batch N] [--seq S] [--top K]"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from transformer_zoo import TEXT, build, make_input, select  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    spec = select(args.model)[0]
    dev = torch.device("cuda")
    if spec.family == TEXT:
        x = make_input(spec, args.batch or 8, seq=args.seq, device=dev)
    else:
        x = make_input(spec, args.batch or 32, image_size=args.image_size, device=dev)
    model = build(spec.name, attn="sdpa", image_size=args.image_size).to(dev)
    with torch.no_grad():
        target = torch.randn(model(x).shape, device=dev)
    params = list(model.parameters())

    def step():
        F.mse_loss(model(x), target).backward()
        for p in params:
            p.grad = None

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            k = kernels.setdefault(e.name, [0.0, 0])
            k[0] += (getattr(e, "device_time", 0) or getattr(e, "self_device_time_total", 0)) / 1e3
            k[1] += 1
    total = sum(v[0] for v in kernels.values())
    top = sorted(kernels.items(), key=lambda kv: -kv[1][0])[: args.top]
    print(json.dumps({"model": spec.name, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "kernel_ms_total": total,
                      "top": [{"kernel": n[:120], "ms": v[0], "calls": v[1]} for n, v in top]}, indent=1))


if __name__ == "__main__":
    main()
