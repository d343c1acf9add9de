#!/usr/bin/env python3
"""PyTorch yardstick for real training recipes (issue 15): the absolute peak of one whole training step
(forward, loss, backward, optimizer.step(), zero_grad(set_to_none=True)) for CNNs and transformers, per
optimizer (SGD with momentum, Adam; PyTorch's default foreach implementation unless --optimizer-impl),
precision (fp32 with TF32 off; bf16 autocast) and loss (MSE against a float target of the output's shape;
cross-entropy against integer labels over the class axis: dim 1 of [N, C], the last dim of a language
model's [B, S, V] logits, flattened as usual).

Per case: baseline_bytes = torch.cuda.memory_allocated() between steps after warm-up (weights, buffers,
batch, target or labels, optimizer state); max_allocated_bytes = torch.cuda.max_memory_allocated() over the
measured steps (the absolute peak, baseline included); step_ms = median of CUDA-event-timed steps.
The models are the ones whose ONNX exports memplan plans: torchvision resnet18 / mobilenet_v2
(samples/models/*.train.onnx) and bench/transformer_zoo.py's transformers with SDPA attention
(samples/transformers/*.train.onnx).

usage: torch_recipes.py [--only NAME,...] [--optimizers momentum,adam] [--precisions fp32,bf16]
        [--losses mse,ce] [--optimizer-impl foreach|fused|for-loop] [--steps 3] [--warmup 3] [--json PATH]
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

CNNS = {"resnet18": "samples/models/resnet18.train.onnx", "mobilenet_v2": "samples/models/mobilenet_v2.train.onnx"}
TRANSFORMERS = ("gpt2_small", "llama_gqa", "bert_small", "deit_tiny")
TEXT_BATCH, SEQ, VISION_BATCH = 8, 256, 32


ONNX_DIR = "samples/transformers"  # --onnx-dir: where the transformers' training exports are


def build(name, device):
    """(model, input, onnx path, memplan --dim arguments)"""
    if name in CNNS:
        import torchvision
        model = getattr(torchvision.models, name)()
        x = torch.randn(VISION_BATCH, 3, 224, 224, device=device)
        return model.to(device), x, CNNS[name], [f"batch={VISION_BATCH}"]
    from transformer_zoo import TEXT, build as zoo_build, make_input, select
    spec = select(name)[0]
    if spec.family == TEXT:
        x = make_input(spec, TEXT_BATCH, seq=SEQ, device=device)
        dims = [f"batch={TEXT_BATCH}", f"seq={SEQ}"]
    else:
        x = make_input(spec, VISION_BATCH, image_size=224, device=device)
        dims = [f"batch={VISION_BATCH}"]
    model = zoo_build(name, attn="sdpa", image_size=224).to(device)
    return model, x, f"{ONNX_DIR}/{name}.train.onnx", dims


def make_optimizer(kind, impl, params):
    kw = {}
    if impl == "fused":
        kw["fused"] = True
    elif impl == "foreach":
        kw["foreach"] = True
    else:
        kw["foreach"] = False
    if kind == "momentum":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, **kw)
    if kind == "adam":
        return torch.optim.Adam(params, lr=1e-3, **kw)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, **kw)
    raise ValueError(kind)


def measure(name, opt_kind, precision, loss_kind, args, device):
    torch.manual_seed(0)
    model, x, onnx_path, dims = build(name, device)
    model.train()
    with torch.no_grad():
        out_shape = tuple(model(x).shape)
    gen = torch.Generator(device=device).manual_seed(1)
    if loss_kind == "mse":
        target = torch.randn(out_shape, device=device, generator=gen)
    else:
        classes = out_shape[-1] if len(out_shape) == 3 else out_shape[1]
        label_shape = out_shape[:-1] if len(out_shape) == 3 else out_shape[:1] + out_shape[2:]
        target = torch.randint(0, classes, label_shape, device=device, generator=gen)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(opt_kind, args.optimizer_impl, params)
    amp = precision == "bf16"

    def loss_of(out):
        if loss_kind == "mse":
            return F.mse_loss(out, target)
        if out.dim() == 3:
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
        return F.cross_entropy(out, target)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = loss_of(model(x))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times = []
    loss_value = None
    for _ in range(args.steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        loss = step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
        # Not held into the next step: PyTorch's mse_loss keeps an output-sized storage under its 0-dim loss
        # (pytorch/pytorch#185647), which would otherwise count in the next step's peak.
        loss_value = float(loss)
        del loss
    peak = torch.cuda.max_memory_allocated()

    def nbytes(ts):
        return sum(t.numel() * t.element_size() for t in ts)

    state = nbytes(v for st in opt.state.values() for v in st.values() if torch.is_tensor(v))
    result = {
        "model": name, "optimizer": opt_kind, "optimizer_impl": args.optimizer_impl, "precision": precision,
        "loss": loss_kind, "onnx": onnx_path, "dims": dims, "input_shape": list(x.shape),
        "output_shape": list(out_shape), "weights_bytes": nbytes(params), "buffers_bytes": nbytes(model.buffers()),
        "input_bytes": nbytes([x]), "target_bytes": nbytes([target]), "optimizer_state_bytes": state,
        "baseline_bytes": baseline, "max_allocated_bytes": peak, "step_ms": statistics.median(times),
        "loss_value": loss_value,
    }
    del model, opt, x, target, params
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(list(CNNS) + list(TRANSFORMERS)))
    ap.add_argument("--optimizers", default="momentum,adam")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--losses", default="mse,ce")
    ap.add_argument("--optimizer-impl", default="foreach", choices=["foreach", "fused", "for-loop"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", default="")
    ap.add_argument("--onnx-dir", default=ONNX_DIR,
                    help="the transformers' training exports (bench/export_transformers.py --out DIR for held-out models)")
    args = ap.parse_args()
    globals()["ONNX_DIR"] = args.onnx_dir
    if not torch.cuda.is_available():
        print("error: CUDA is not available; this script measures GPU memory", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    report = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d"), "tf32": False, "cases": []}
    print(f"device {report['device']}, torch {torch.__version__}")
    failures = 0
    for name in [n for n in args.only.split(",") if n]:
        for opt_kind in args.optimizers.split(","):
            for precision in args.precisions.split(","):
                for loss_kind in args.losses.split(","):
                    try:
                        r = measure(name, opt_kind, precision, loss_kind, args, device)
                        report["cases"].append(r)
                        print(f"{name:<13} {opt_kind:<9} {precision:<5} {loss_kind:<4} peak "
                              f"{r['max_allocated_bytes'] / 2**20:9.1f} MiB base {r['baseline_bytes'] / 2**20:8.1f} "
                              f"MiB step {r['step_ms']:7.2f} ms", flush=True)
                    except Exception as e:  # one failing case must not hide the others
                        failures += 1
                        report["cases"].append({"model": name, "optimizer": opt_kind, "precision": precision,
                                                "loss": loss_kind, "error": f"{type(e).__name__}: {e}"})
                        traceback.print_exc()
                    torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
