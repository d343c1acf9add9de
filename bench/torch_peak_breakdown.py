#!/usr/bin/env python3
"""What PyTorch holds at the peak of one training step (bench/torch_recipes.py's recipe): records the CUDA
caching allocator's history (torch.cuda.memory._record_memory_history) over one step after warm-up, replays
the alloc/free events to find the moment of the most allocated bytes, and prints the blocks live then, largest
first, each with the innermost frames of the Python stack that allocated it. Used to check memplan's
pytorch_peak_bytes model (planner/pytorch/eager_model.cpp) case by case.

usage: torch_peak_breakdown.py MODEL OPTIMIZER PRECISION LOSS [--top 25]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import torch_recipes as tr  # noqa: E402


def frames_of(frames, n=4):
    keep = [f for f in frames if not f["filename"].endswith(("torch_peak_breakdown.py",))]
    return " <- ".join(f"{os.path.basename(f['filename'])}:{f['line']}:{f['name']}" for f in keep[:n])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("optimizer")
    ap.add_argument("precision")
    ap.add_argument("loss")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device("cuda")
    torch.manual_seed(0)
    model, x, _, _ = tr.build(a.model, device)
    model.train()
    with torch.no_grad():
        out_shape = tuple(model(x).shape)
    if a.loss == "mse":
        target = torch.randn(out_shape, device=device)
    else:
        classes = out_shape[-1] if len(out_shape) == 3 else out_shape[1]
        shape = out_shape[:-1] if len(out_shape) == 3 else out_shape[:1] + out_shape[2:]
        target = torch.randint(0, classes, shape, device=device)
    opt = tr.make_optimizer(a.optimizer, "foreach", [p for p in model.parameters() if p.requires_grad])
    F = torch.nn.functional

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            out = model(x)
            if a.loss == "mse":
                loss = F.mse_loss(out, target)
            elif out.dim() == 3:
                loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
            else:
                loss = F.cross_entropy(out, target)
            del out
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=1000000, stacks="python")
    step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    peak = torch.cuda.max_memory_allocated()
    events = [e for t in snap["device_traces"] for e in t]
    live, cur, best, best_live = {}, base, base, {}
    for e in events:
        if e["action"] == "alloc":
            live[e["addr"]] = e
            cur += e["size"]
        elif e["action"] in ("free_requested",):
            if e["addr"] in live:
                cur -= live.pop(e["addr"])["size"]
        if cur > best:
            best, best_live = cur, dict(live)
    print(f"{a.model} {a.optimizer} {a.precision} {a.loss}: baseline {base / 2**20:.1f} MiB, max_memory_allocated "
          f"{peak / 2**20:.1f} MiB, replayed peak {best / 2**20:.1f} MiB ({len(best_live)} blocks of this step live)")
    rows = sorted(best_live.values(), key=lambda e: -e["size"])
    for e in rows[:a.top]:
        print(f"  {e['size'] / 2**20:9.2f} MiB  {frames_of(e.get('frames', []))}")
    rest = sum(e["size"] for e in rows[a.top:])
    print(f"  {rest / 2**20:9.2f} MiB  in {max(0, len(rows) - a.top)} smaller blocks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
