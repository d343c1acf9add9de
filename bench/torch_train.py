#!/usr/bin/env python3
"""PyTorch yardstick for `bench_cuda train`: the training step (MSE loss, Adam) of the transformer that
bench/make_gpt.py writes, in exact float32 (no TF32), eager without checkpointing and with
torch.utils.checkpoint over round(sqrt(layers)) segments of the blocks. Memory is
torch.cuda.max_memory_allocated during one step over what is allocated between steps (weights, Adam state,
the batch); time is the median of cudaEvent-timed steps after warm-up. Prints one JSON object.

usage: torch_train.py [--layers 8] [--d 512] [--heads 8] [--seq 256] [--batch 16] [--out-dim 512] [--steps 20]
"""
import argparse
import json
import math

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        h, dh = self.heads, d // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q = q.reshape(b, t, h, dh).transpose(1, 2)
        k = k.reshape(b, t, h, dh).permute(0, 2, 3, 1)
        v = v.reshape(b, t, h, dh).transpose(1, 2)
        att = torch.softmax((q @ k) / math.sqrt(dh), dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        f = self.fc1(self.ln2(x))
        return x + self.fc2(f * (1 + torch.erf(f / math.sqrt(2))) * 0.5)


class GPT(nn.Module):
    def __init__(self, layers, d, heads, out_dim):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, out_dim, bias=False)
        self.segments = 0

    def forward(self, x):
        if self.segments:
            x = checkpoint_sequential(self.blocks, self.segments, x, use_reentrant=False)
        else:
            x = self.blocks(x)
        return self.head(self.ln(x))


def measure(model, opt, x, target, steps):
    def step():
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    between = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    times = []
    for _ in range(steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    times.sort()
    return {"peak_over_persistent_bytes": peak - between, "max_memory_allocated_bytes": peak, "persistent_bytes": between,
            "step_seconds": times[len(times) // 2], "step_seconds_min": times[0], "steps_timed": steps}


def setup(count_flag, count_default):
    """Parses the network's size flags (and `--<count_flag>`), sets exact float32 and the seed; returns
    the arguments, the CUDA device and the GPT on it."""
    ap = argparse.ArgumentParser()
    for name, default in (("layers", 8), ("d", 512), ("heads", 8), ("seq", 256), ("batch", 16), ("out-dim", 512),
                          (count_flag, count_default)):
        ap.add_argument("--" + name, type=int, default=default)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.manual_seed(0)
    dev = torch.device("cuda")
    return a, dev, GPT(a.layers, a.d, a.heads, a.out_dim).to(dev)


def main():
    a, dev, model = setup("steps", 20)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x = torch.rand(a.batch, a.seq, a.d, device=dev) * 2 - 1
    target = torch.rand(a.batch, a.seq, a.out_dim, device=dev) * 2 - 1
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "weight_bytes": weights,
           "config": vars(a), "optimizer": "adam (torch default: foreach)"}
    res["eager"] = measure(model, opt, x, target, a.steps)
    model.segments = max(1, round(math.sqrt(a.layers)))
    res["checkpoint_sqrt"] = measure(model, opt, x, target, a.steps)
    res["checkpoint_sqrt"]["segments"] = model.segments
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
