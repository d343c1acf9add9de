#!/usr/bin/env python3
"""memplan's planned allocator vs PyTorch's caching allocator in real training loops (issue 17).

Per model, two subprocesses (the allocator must be chosen before CUDA starts), same seed, 100 Adam steps:
PyTorch's default allocator, then memplan_torch.use_planned_allocator(). Records model,
pytorch_max_allocated_bytes, pytorch_reserved_bytes (default run), memplan_reserved_bytes (memplan's stats),
losses_identical (bit for bit), step_time_ratio (memplan / PyTorch, median step), and a short-last-batch run
(the last batch shorter: misses counted, losses still identical).

Both runs are deterministic (deterministic algorithms, strict where the model allows it, else warn_only: see
deterministic(); CUBLAS_WORKSPACE_CONFIG=:4096:8, cudnn.benchmark off, set before any CUDA work), and the memplan run marks the whole step, the batch's copy to the device included, so
only the model and its weights are allocated outside a step (memplan's `setup` count; `unstepped` stays 0).

usage: torch_allocator.py --out bench/results/torch_allocator.json [--lib build/libmemplan_torch.so]
        [--steps 100] [--only resnet50,gpt2,mobilenet_v2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(os.path.dirname(HERE), "python")


def build(name):
    import torch
    import torch.nn as nn
    if name in ("resnet50", "mobilenet_v2"):
        import torchvision
        m = getattr(torchvision.models, name)(num_classes=1000)
        return m, lambda g, n: (torch.randn(n, 3, 224, 224, generator=g), torch.randint(0, 1000, (n,), generator=g)), 32
    if name == "gpt2":
        try:
            from transformers import GPT2Config, GPT2LMHeadModel
            cfg = GPT2Config(n_positions=256, attn_implementation="sdpa")
            inner = GPT2LMHeadModel(cfg)

            class LM(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.m = inner

                def forward(self, ids):
                    return self.m(input_ids=ids, use_cache=False).logits
            m, vocab = LM(), cfg.vocab_size
        except ImportError:  # a plain GPT-2-size decoder
            layer = nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True, activation="gelu", norm_first=True)

            class LM(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.emb, self.pos = nn.Embedding(50257, 768), nn.Embedding(256, 768)
                    self.body = nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)
                    self.head = nn.Linear(768, 50257, bias=False)

                def forward(self, ids):
                    s = ids.shape[1]
                    x = self.emb(ids) + self.pos(torch.arange(s, device=ids.device))
                    mask = nn.Transformer.generate_square_subsequent_mask(s, device=ids.device)
                    return self.head(self.body(x, mask=mask, is_causal=True))
            m, vocab = LM(), 50257
        return m, lambda g, n: (torch.randint(0, vocab, (n, 256), generator=g),
                                torch.randint(0, vocab, (n, 256), generator=g)), 8
    raise ValueError(name)


def deterministic(strict):
    """Same kernels, same reduction orders in both runs: before anything touches CUDA. Strict where every op of the
    model has a deterministic CUDA kernel (scaled_dot_product_attention's flash and memory-efficient backward
    accumulate dQ with atomics unless strict mode asks for their deterministic path; with warn_only they only warn,
    and two runs of PyTorch's own allocator differ). warn_only where an op has none (ResNet's adaptive_avg_pool2d
    backward: one contribution per element at 1x1, so its atomics do not reorder anything): main() tries strict
    first and falls back per model, both allocators in the same mode."""
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    import torch
    torch.use_deterministic_algorithms(True, warn_only=not strict)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False


def child(name, mode, steps, short, lib, strict):
    """One training run in this process; prints one JSON line."""
    deterministic(strict)
    sys.path.insert(0, PKG)
    import memplan_torch
    if mode == "memplan":
        # Two recorded steps: the first allocates Adam's state, the second is the steady step the plan serves.
        memplan_torch.use_planned_allocator(record_steps=2, lib=lib or None)
    import torch
    import torch.nn.functional as F
    torch.manual_seed(0)
    model, batch_fn, n = build(name)
    model = model.cuda().train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    losses, times = [], []
    for i in range(steps):
        x, y = batch_fn(g, n if not (short and i == steps - 1) else max(1, n // 3))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if mode == "memplan":  # the whole step: the batch's copy, forward, zero_grad, backward, optimizer step
            memplan_torch.step_begin()
        x, y = x.cuda(), y.cuda()
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del out, x, y  # freed inside the step, as every transient block
        if mode == "memplan":
            memplan_torch.step_end()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(float.hex(loss.item()))
        del loss  # not carried into the next step
    out = {"losses": losses, "median_step_s": statistics.median(times[5:] if len(times) > 10 else times)}
    if mode == "memplan":
        out["stats"] = memplan_torch.stats()
        out["memplan_reserved_bytes"] = memplan_torch.reserved_bytes(out["stats"])
    else:
        out["max_allocated_bytes"] = torch.cuda.max_memory_allocated()
        out["reserved_bytes"] = torch.cuda.max_memory_reserved()
    print(json.dumps(out))


STRICT = {}  # per model: whether strict determinism runs (decided by its first run)


def spawn(name, mode, steps, short, lib):
    def run(strict):
        cmd = [sys.executable, os.path.abspath(__file__), "--child", name, mode, str(steps), "short" if short else "full",
               lib or "", "strict" if strict else "warn"]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    r = run(STRICT.get(name, True))
    if r.returncode != 0 and name not in STRICT and "deterministic" in r.stderr:
        STRICT[name] = False  # an op without a deterministic CUDA kernel: warn_only for this model's every run
        r = run(False)
    STRICT.setdefault(name, True)
    if r.returncode != 0:
        raise RuntimeError(f"{name} {mode} exited {r.returncode}: {r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, name, mode, steps, short, lib, strict = sys.argv
        child(name, mode, int(steps), short == "short", lib, strict == "strict")
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--lib", default="")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--short-steps", type=int, default=12)
    ap.add_argument("--only", default="resnet50,gpt2,mobilenet_v2")
    ap.add_argument("--time-reps", type=int, default=3, help="alternating runs per allocator for the step time")
    a = ap.parse_args()
    import torch
    report = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
              "steps": a.steps, "optimizer": "Adam", "models": []}
    for name in a.only.split(","):
        row = {"model": name}
        try:
            ref, got = spawn(name, "default", a.steps, False, a.lib), spawn(name, "memplan", a.steps, False, a.lib)
            # Step time: the runs alternate (default, memplan, default, ...) so clock and thermal drift between
            # processes falls on both sides; the ratio is of the medians over the runs.
            ref_t, got_t = [ref["median_step_s"]], [got["median_step_s"]]
            for _ in range(a.time_reps - 1):
                ref_t.append(spawn(name, "default", a.steps, False, a.lib)["median_step_s"])
                got_t.append(spawn(name, "memplan", a.steps, False, a.lib)["median_step_s"])
            row.update(pytorch_max_allocated_bytes=ref["max_allocated_bytes"], pytorch_reserved_bytes=ref["reserved_bytes"],
                       memplan_reserved_bytes=got["memplan_reserved_bytes"], losses_identical=ref["losses"] == got["losses"],
                       step_time_ratio=round(statistics.median(got_t) / statistics.median(ref_t), 4),
                       pytorch_step_s=statistics.median(ref_t), memplan_step_s=statistics.median(got_t),
                       pytorch_step_s_runs=ref_t, memplan_step_s_runs=got_t, memplan_stats=got["stats"])
            sref = spawn(name, "default", a.short_steps, True, a.lib)
            sgot = spawn(name, "memplan", a.short_steps, True, a.lib)
            row["short_last_batch"] = {"steps": a.short_steps, "losses_identical": sref["losses"] == sgot["losses"],
                                       "memplan_stats": sgot["stats"]}
            # Control: PyTorch's default allocator against itself (the short run's full batches are the same steps):
            # where this is false, PyTorch's own kernels are not bit-repeatable and losses_identical cannot hold.
            k = min(a.short_steps - 1, a.steps)
            row["pytorch_repeatable"] = sref["losses"][:k] == ref["losses"][:k]
            row["deterministic_mode"] = "strict" if STRICT.get(name, True) else "warn_only"
            lr, lg = [float.fromhex(v) for v in ref["losses"]], [float.fromhex(v) for v in got["losses"]]
            diffs = [i for i, (p, q) in enumerate(zip(lr, lg)) if p != q]
            row["first_differing_step"] = diffs[0] if diffs else None
            row["max_loss_rel_diff"] = max((abs(p - q) / max(abs(p), 1e-30) for p, q in zip(lr, lg)), default=0.0)
        except Exception as e:  # reported; the other models go on
            row["error"] = f"{type(e).__name__}: {str(e)[:3000]}"
        report["models"].append(row)
        print(json.dumps({k: v for k, v in row.items() if "stats" not in k}), flush=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
