#!/usr/bin/env python3
"""PyTorch yardstick for the transformer set of bench/export_transformers.py (same builders, same configs,
from bench/transformer_zoo.py): the memory and time of one eager training step on CUDA, float32 with TF32
off, with SDPA attention and with eager (explicit matmul-softmax) attention.

The step is: forward, MSE loss against a fixed random target of the output's shape (memplan's current
training loss), backward, then (only with --optimizer adam) Adam.step(); it ends by setting every gradient to
None, so each step starts from the same memory. Measured per model and attention mode:

  baseline_bytes     torch.cuda.memory_allocated() after the warm-up steps, between two steps: weights and
                     buffers, the input batch, the target, Adam's state (with --optimizer adam) and what the
                     CUDA libraries keep in PyTorch's allocator (e.g. the cuBLAS workspace);
                     other_persistent_bytes is baseline_bytes less the parts this script can name.
  max_allocated_bytes torch.cuda.max_memory_allocated() over the timed steps (peak stats reset after warm-up).
  peak_over_baseline_bytes = max_allocated_bytes - baseline_bytes: what the step itself adds at its peak
                     (activations saved for backward, gradients, temporaries, the optimizer's temporaries).
  step_ms            median (and min) of the timed steps, each timed with CUDA events around the whole step.

Writes JSON with --json PATH. Without CUDA it stops; `--device cpu --dry-run` runs one step of every model
at tiny sizes on the CPU to prove the code works (no memory numbers).

usage: torch_transformer_peaks.py [--only NAME,...] [--attn sdpa,eager] [--text-batch 8] [--seq 256]
        [--vision-batch 32] [--image-size 224] [--optimizer none|adam] [--steps 20] [--warmup 5]
        [--json PATH] [--device cuda|cpu] [--dry-run]
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from transformer_zoo import ATTN_MODES, TEXT, build, make_input, select  # noqa: E402

DRY_TEXT = (2, 16)  # batch, seq
DRY_VISION = (2, 224)  # batch, image size (swin_tiny's windows need 224)


def tensor_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def adam_state_bytes(opt):
    return sum(tensor_bytes(v for v in st.values() if torch.is_tensor(v)) for st in opt.state.values())


def measure(spec, attn, args, device):
    if spec.family == TEXT:
        batch, seq = (DRY_TEXT if args.dry_run else (args.text_batch, args.seq))
        image_size = args.image_size
        x = make_input(spec, batch, seq=seq, device=device)
    else:
        batch, image_size = (DRY_VISION if args.dry_run else (args.vision_batch, args.image_size))
        x = make_input(spec, batch, image_size=image_size, device=device)
    model = build(spec.name, attn=attn, image_size=image_size).to(device)
    with torch.no_grad():
        out_shape = tuple(model(x).shape)
    target = torch.randn(out_shape, device=device, generator=torch.Generator(device=device).manual_seed(1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4) if args.optimizer == "adam" else None
    params = list(model.parameters())
    losses = []

    def step():
        loss = F.mse_loss(model(x), target)
        loss.backward()
        if opt is not None:
            opt.step()
        for p in params:
            p.grad = None
        losses[:] = [loss.detach()]

    result = {
        "input_shape": list(x.shape), "output_shape": list(out_shape),
        "parameters": sum(p.numel() for p in params),
        "weights_bytes": tensor_bytes(params),
        "buffers_bytes": tensor_bytes(model.buffers()),
        "input_bytes": tensor_bytes([x]),
        "target_bytes": tensor_bytes([target]),
    }
    if args.dry_run:
        t0 = time.perf_counter()
        step()
        result["step_ms"] = (time.perf_counter() - t0) * 1e3
        result["loss"] = float(losses[-1])
        return result

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    after = torch.cuda.memory_allocated()
    opt_bytes = adam_state_bytes(opt) if opt is not None else 0
    named = result["weights_bytes"] + result["buffers_bytes"] + result["input_bytes"] + result["target_bytes"]
    result.update({
        "optimizer_state_bytes": opt_bytes,
        "gradients_bytes": result["weights_bytes"],
        "baseline_bytes": baseline,
        "other_persistent_bytes": baseline - named - opt_bytes,
        "max_allocated_bytes": peak,
        "peak_over_baseline_bytes": peak - baseline,
        "allocated_after_steps_bytes": after,
        "step_ms": statistics.median(times),
        "step_ms_min": min(times),
        "loss": float(losses[-1]),
    })
    return result


def mib(n):
    return f"{n / 2**20:9.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--attn", default="sdpa,eager", help="attention modes to measure, comma-separated")
    ap.add_argument("--text-batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--vision-batch", type=int, default=32)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--optimizer", default="none", choices=["none", "adam"])
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps before")
    ap.add_argument("--json", default="", help="write the results here")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dry-run", action="store_true",
                    help="one step of each model at tiny sizes (text b2 s16, vision b2 224), no measurements")
    args = ap.parse_args()
    modes = [m.strip() for m in args.attn.split(",") if m.strip()]
    if not modes or any(m not in ATTN_MODES for m in modes):
        raise SystemExit(f"--attn {args.attn!r}: expected a comma-separated subset of {ATTN_MODES}")
    specs = select(args.only)

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: CUDA is not available; this script measures GPU memory. "
              "To check the code on the CPU: --device cpu --dry-run", file=sys.stderr)
        return 2
    if args.device == "cpu" and not args.dry_run:
        print("error: --device cpu only with --dry-run (the memory numbers are CUDA allocator statistics)",
              file=sys.stderr)
        return 2
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")

    import transformers
    try:
        import timm
        timm_version = timm.__version__
    except ImportError:
        timm_version = None
    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
        "timm": timm_version, "date": time.strftime("%Y-%m-%d"),
        "dtype": "float32", "tf32": False, "optimizer": args.optimizer, "loss": "mse against a random target",
        "steps": 1 if args.dry_run else args.steps, "warmup": 0 if args.dry_run else args.warmup,
        "dry_run": args.dry_run,
        "text": {"batch": args.text_batch, "seq": args.seq} if not args.dry_run else
                {"batch": DRY_TEXT[0], "seq": DRY_TEXT[1]},
        "vision": {"batch": args.vision_batch, "image_size": args.image_size} if not args.dry_run else
                  {"batch": DRY_VISION[0], "image_size": DRY_VISION[1]},
        "memory": "baseline_bytes = memory_allocated() between steps after warm-up (weights, buffers, input, "
                  "target, optimizer state, library workspaces); peak_over_baseline_bytes = "
                  "max_memory_allocated() over the timed steps - baseline_bytes",
        "models": {},
    }
    print(f"device {report['device']}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"timm {timm_version}, optimizer {args.optimizer}{', DRY RUN' if args.dry_run else ''}")
    print(f"{'model':<12} {'attn':<6} {'input':<18} {'weights MiB':>11} {'base MiB':>9} {'peak-base MiB':>13} "
          f"{'step ms':>8}")
    failures = 0
    for spec in specs:
        entry = report["models"].setdefault(spec.name, {"family": spec.family, "description": spec.description})
        for attn in modes:
            try:
                r = measure(spec, attn, args, device)
                entry[attn] = r
                base = mib(r["baseline_bytes"]) if "baseline_bytes" in r else f"{'-':>9}"
                peak = mib(r["peak_over_baseline_bytes"]) if "peak_over_baseline_bytes" in r else f"{'-':>9}"
                print(f"{spec.name:<12} {attn:<6} {'x'.join(map(str, r['input_shape'])):<18} "
                      f"{mib(r['weights_bytes']):>11} {base:>9} {peak:>13} {r['step_ms']:8.2f}", flush=True)
            except Exception as e:  # noqa: BLE001  (an OOM or an unsupported mode: record it, go on)
                entry[attn] = {"error": f"{type(e).__name__}: {str(e).strip()[:400]}"}
                print(f"{spec.name:<12} {attn:<6} FAILED: {entry[attn]['error']}", flush=True)
                traceback.print_exc()
                failures += 1
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
