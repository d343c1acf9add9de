#!/usr/bin/env python3
"""PyTorch yardstick on the GPU machine: inference and training peaks, checkpoint_sequential at sqrt(N)
segments, and pinned host<->device bandwidth. Prints JSON; run in the same command as memplan so the
figures are side by side. Usage: python3 bench/pytorch_yardstick.py [--out FILE] [--memplan EXE]
[--bench-cuda EXE] (bench_cuda: memplan's plans measured on the same GPU)"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint_sequential


def mib(x):
    return round(x / 2**20, 2)


def build(name):
    import torchvision
    if name == "resnet50":
        return torchvision.models.resnet50(), (3, 224, 224), "image"
    if name == "mobilenet_v2":
        return torchvision.models.mobilenet_v2(), (3, 224, 224), "image"
    if name == "bert_base":
        from transformers import BertConfig, BertModel
        # As the ONNX export: eager attention (explicit scores and softmax) and no dropout (eval export).
        # GELU as the exported Erf formula (gelu_python), so both run the same ops.
        cfg = BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, hidden_act="gelu_python")
        cfg._attn_implementation = "eager"
        return BertModel(cfg), (128,), "tokens"
    raise ValueError(name)


def make_input(kind, shape, batch, dev):
    if kind == "image":
        return torch.randn(batch, *shape, device=dev)
    return torch.randint(0, 30000, (batch, *shape), device=dev)


def output_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    return out[0]


def param_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters()) + sum(
        b.numel() * b.element_size() for b in model.buffers())


def inference_peak(name, batch):
    dev = "cuda"
    model, shape, kind = build(name)
    model = model.to(dev).eval()
    x = make_input(kind, shape, batch, dev)
    with torch.no_grad():
        output_tensor(model(x))  # warm-up (cuDNN workspaces, lazy init)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        y = output_tensor(model(x))
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    out_bytes = y.numel() * y.element_size()
    res = dict(model=name, batch=batch, weights_bytes=param_bytes(model), input_bytes=x.numel() * x.element_size(),
               baseline_bytes=base, peak_bytes=peak, peak_over_weights_and_input_bytes=peak - base,
               output_bytes=out_bytes)
    del model, x, y
    torch.cuda.empty_cache()
    return res


def sequential_view(name, model):
    """The model as a list of modules run one after another, for checkpoint_sequential."""
    if name == "resnet50":
        m = model
        mods = [m.conv1, m.bn1, m.relu, m.maxpool, *m.layer1, *m.layer2, *m.layer3, *m.layer4, m.avgpool,
                nn.Flatten(1), m.fc]
        return nn.Sequential(*mods)
    if name == "mobilenet_v2":
        return nn.Sequential(*model.features, nn.AdaptiveAvgPool2d(1), nn.Flatten(1), *model.classifier)
    raise ValueError(name)


class BertLayers(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, h):
        out = self.layer(h)
        return out[0] if isinstance(out, tuple) else out


def train_step_stats(name, batch, seq=None, segments=None, iters=6):
    dev = "cuda"
    torch.manual_seed(0)
    model, shape, kind = build(name)
    if seq is not None:
        shape = (seq,)
    model = model.to(dev).train()
    x = make_input(kind, shape, batch, dev)

    if name == "bert_base":
        emb = model.embeddings
        layers = nn.Sequential(*[BertLayers(l) for l in model.encoder.layer])

        def fwd():
            h = emb(x)
            if segments:
                h = checkpoint_sequential(layers, segments, h, use_reentrant=False)
            else:
                h = layers(h)
            return h
    else:
        seqm = sequential_view(name, model)

        def fwd():
            if segments:
                return checkpoint_sequential(seqm, segments, x, use_reentrant=False)
            return seqm(x)

    with torch.no_grad():
        target = torch.randn_like(fwd().float())

    def step():
        y = fwd()
        loss = ((y - target) ** 2).mean()
        loss.backward()
        return loss

    step()  # warm-up: grads allocated, cuDNN workspaces
    for p in model.parameters():
        p.grad = None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    times = []
    for _ in range(iters):
        for p in model.parameters():
            p.grad = None
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        step()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    res = dict(model=name, batch=batch, seq=seq, segments=segments, weights_bytes=param_bytes(model),
               baseline_bytes=base, peak_bytes=peak, peak_over_baseline_bytes=peak - base, grad_bytes=grads,
               input_bytes=x.numel() * x.element_size(), target_bytes=target.numel() * target.element_size(),
               step_seconds_median=statistics.median(times))
    del model, x, target
    torch.cuda.empty_cache()
    return res


def pinned_bandwidth(nbytes=1 << 30, reps=10):
    h = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    d = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    out = {}
    for label, fn in (("host_to_device", lambda: d.copy_(h, non_blocking=True)),
                      ("device_to_host", lambda: h.copy_(d, non_blocking=True))):
        fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e) / 1e3)
        out[label + "_bytes_per_s"] = nbytes / statistics.median(ts)
    x = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        y.copy_(x)
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    out["device_copy_bytes_per_s"] = 2 * x.numel() / statistics.median(ts)  # read + write
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float32)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.float32)
    for tf32, key in ((False, "fp32_flops"), (True, "tf32_flops")):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a @ b
        torch.cuda.synchronize()
        ts = []
        for _ in range(5):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            a @ b
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e) / 1e3)
        out[key] = 2 * 8192**3 / statistics.median(ts)
    torch.backends.cuda.matmul.allow_tf32 = False
    return out


MODELS = {"resnet50": ("resnet50.dyn.onnx", "resnet50.train.onnx", 32, None),
          "mobilenet_v2": ("mobilenet_v2.dyn.onnx", "mobilenet_v2.train.onnx", 32, None),
          "bert_base": ("bert_base.dyn.onnx", "bert_base.dyn.onnx", 8, 128)}


def memplan_json(memplan, args):
    import subprocess
    out = subprocess.run([memplan, *args, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": out.stderr.strip(), "exit": out.returncode}
    return json.loads(out.stdout)


def memplan_gpu_steps(bench_cuda, samples, res):
    """memplan's plans run on this GPU (bench_cuda train): none, sqrt, and optimal and auto at the memory
    PyTorch's checkpoint_sequential reached, in the same run as PyTorch."""
    import subprocess
    out = {}
    for name, (_, train, batch, seq) in MODELS.items():
        ck = [t for t in res.get("training", []) if t["model"] == name and t["segments"]]
        if not ck:
            continue
        args = [bench_cuda, "train", f"{samples}/{train}", "10", f"batch={batch}", "optimizer=none",
                f"budget={ck[0]['peak_bytes']}", "strategies=optimal,auto"] + ([f"seq={seq}"] if seq else [])
        p = subprocess.run(args, capture_output=True, text=True)
        out[name] = json.loads(p.stdout) if p.returncode == 0 else {"error": p.stderr.strip()[-2000:], "exit": p.returncode}
    res["memplan_gpu"] = out


def memplan_side(memplan, samples, res):
    """memplan's figures for the same models, in the same run as PyTorch's."""
    inf = {}
    for name, (dyn, _, _, _) in MODELS.items():
        seq = ["--dim", "seq=128"] if MODELS[name][3] else []  # --dim names only a symbolic dim of the model
        j = memplan_json(memplan, ["analyze", f"{samples}/{dyn}", "--dim", "batch=32", *seq])
        j.pop("live_at_live_peak", None)
        inf[name] = j
    res["memplan_inference"] = inf
    tr = {}
    for name, (_, train, batch, seq) in MODELS.items():
        dims = ["--dim", f"batch={batch}"] + (["--dim", f"seq={seq}"] if seq else [])
        base = ["plan", f"{samples}/{train}", "--train", "--optimizer", "none", *dims]
        entry = {"none": memplan_json(memplan, base + ["--strategy", "none"]),
                 "sqrt": memplan_json(memplan, base + ["--strategy", "sqrt"])}
        ck = [t for t in res.get("training", []) if t["model"] == name and t["segments"]]
        if ck:
            budget = str(ck[0]["peak_bytes"])
            entry["budget_from_pytorch_checkpoint"] = int(budget)
            for strat in ("optimal", "auto", "budget"):
                # PyTorch's max_memory_allocated counts no library workspaces: compare without them.
                entry[strat] = memplan_json(memplan, base + ["--strategy", strat, "--budget", budget, "--library-bytes", "0"])
        tr[name] = entry
    res["memplan_training"] = tr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--memplan", help="path of the memplan executable, to run beside PyTorch")
    ap.add_argument("--samples", default="samples/models")
    ap.add_argument("--skip-training", action="store_true")
    ap.add_argument("--bench-cuda", help="path of bench_cuda: run memplan's training plans on this GPU too")
    ap.add_argument("--tf32", action="store_true", help="let cuDNN and cuBLAS use TF32 (PyTorch's default for convolutions)")
    args = ap.parse_args()
    # memplan's CUDA backend computes in exact float32 (FMA math, no TF32): times compare like with like.
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    res = dict(device=torch.cuda.get_device_name(0), torch=torch.__version__, date=time.strftime("%Y-%m-%d"), tf32=args.tf32)
    res["bandwidth"] = pinned_bandwidth()
    res["inference"] = [inference_peak(n, 32) for n in ("resnet50", "mobilenet_v2", "bert_base")]
    if not args.skip_training:
        tr = []
        for name, batch, seq, nmods in (("resnet50", 32, None, 23), ("mobilenet_v2", 32, None, 22),
                                        ("bert_base", 8, 128, 12)):
            tr.append(train_step_stats(name, batch, seq))
            tr.append(train_step_stats(name, batch, seq, segments=max(1, round(math.sqrt(nmods)))))
        res["training"] = tr
    if args.memplan:
        memplan_side(args.memplan, args.samples, res)
    if args.bench_cuda:
        memplan_gpu_steps(args.bench_cuda, args.samples, res)
    text = json.dumps(res, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
