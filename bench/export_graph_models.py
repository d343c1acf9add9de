#!/usr/bin/env python3
"""Graphs straight from PyTorch (issue 17): models whose training-mode ONNX export fails or loses ops, captured
with memplan_torch.export_graph (torch.export, training mode), planned with `memplan plan --train --json`, and
PyTorch's own peak measured in the same run (CUDA max_memory_allocated over one training step after warm-up,
fp32 with TF32 off, SGD without momentum, cross-entropy; the loop `loss = loss_fn(model(x), y)` as in
torch_recipes.py, and beside it a loop that holds the output through the backward). Each model runs in try/except: a failure is reported
with its stage and message, and the others go on.

usage: export_graph_models.py --memplan build/memplan --out bench/results/export_graph_models_2026-11-24
        [--only NAME,...] [--batch 8] [--seq 256] [--image-batch 32] [--no-cuda]
Writes OUT.json and OUT.md. Without CUDA (or with --no-cuda) it exports and plans only.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import memplan_torch  # noqa: E402

# (name, why its training-mode ONNX export fails or loses ops)
HF = {
    "llama_gqa": "TorchScript export fails on current transformers decoders; dynamo gives eval-mode graphs",
    "mistral_gqa": "as llama: SDPA + RMSNorm + rotary, TorchScript export fails, dynamo is eval-only",
    "qwen2_gqa": "as llama (GQA, RMSNorm, rotary)",
    "phi_small": "partial rotary + SDPA decoder; training-mode ONNX export not available through dynamo",
    "gpt2_small": "SDPA attention with attention dropout: the dynamo exporter drops training dropout",
}


class PlainDecoder(nn.Module):
    """A decoder written with torch.nn.functional.scaled_dot_product_attention (causal, dropout) and nn.RMSNorm."""

    def __init__(self, vocab=8192, d=512, heads=8, layers=6, p=0.1):
        super().__init__()
        self.emb, self.heads, self.p = nn.Embedding(vocab, d), heads, p
        self.layers = nn.ModuleList(nn.ModuleDict({
            "n1": nn.RMSNorm(d), "qkv": nn.Linear(d, 3 * d, bias=False), "o": nn.Linear(d, d, bias=False),
            "n2": nn.RMSNorm(d), "up": nn.Linear(d, 4 * d, bias=False), "down": nn.Linear(4 * d, d, bias=False)})
            for _ in range(layers))
        self.norm, self.head = nn.RMSNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        b, s, d = x.shape
        for L in self.layers:
            q, k, v = L["qkv"](L["n1"](x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.p if self.training else 0.0)
            x = x + L["o"](a.transpose(1, 2).reshape(b, s, d))
            x = x + L["down"](F.silu(L["up"](L["n2"](x))))
        return self.head(self.norm(x))


def build(name, args):
    """(model, input, memplan plan arguments, note)"""
    torch.manual_seed(0)
    if name in HF:
        from transformer_zoo import build as zoo_build, make_input, select
        spec = select(name)[0]
        return zoo_build(name, attn="sdpa"), make_input(spec, args.batch, seq=args.seq), ["--loss", "ce"], HF[name]
    if name == "sdpa_decoder":
        m = PlainDecoder()
        return m, torch.randint(0, 8192, (args.batch, args.seq)), ["--loss", "ce"], \
            "F.scaled_dot_product_attention with training dropout: kept as FusedAttention with dropout"
    if name in ("vit_small_droppath", "convnext_tiny_droppath"):
        import timm
        arch = "vit_small_patch16_224" if name.startswith("vit") else "convnext_tiny"
        m = timm.create_model(arch, pretrained=False, drop_path_rate=0.1, num_classes=1000)
        return m, torch.randn(args.image_batch, 3, 224, 224), ["--loss", "ce"], \
            "timm DropPath (stochastic depth: a random per-sample mask) is lost or fails in ONNX training export"
    raise ValueError(f"unknown model {name}")


MODELS = list(HF) + ["sdpa_decoder", "vit_small_droppath", "convnext_tiny_droppath"]


def plan(memplan, path, extra):
    cmd = [memplan, "plan", path, "--train", "--optimizer", "sgd", *extra, "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[-1500:]}")
    return json.loads(r.stdout)


def plan_peak(doc):
    """The planned step's absolute device peak (arena + weights + everything outside the arena)."""
    if "peak_bytes" not in doc:
        raise KeyError(f"no peak_bytes in the plan JSON (keys: {sorted(doc)})")
    return int(doc["peak_bytes"])


def pytorch_peak(model, x, warmup=2, hold_output=False):
    """CUDA max_memory_allocated over one training step after warm-up (fp32, TF32 off, SGD, cross-entropy).

    The step is bench/torch_recipes.py's, `loss = loss_fn(model(x), labels)`: the model's output is freed once the
    loss has read it, as memplan's prediction assumes. With hold_output the loop keeps it to the end of the step
    (`out = model(x); loss = loss_fn(out, labels)`), one output-sized block more over the backward."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    model = model.to(dev).train()
    x = x.to(dev)
    with torch.no_grad():
        shape = tuple(model(x).shape)
    g = torch.Generator(device=dev).manual_seed(1)
    label_shape = shape[:-1] if len(shape) == 3 else shape[:1]
    labels = torch.randint(0, shape[-1] if len(shape) == 3 else shape[1], label_shape, device=dev, generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def loss_of(out):
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), labels.reshape(-1)) if out.dim() == 3 else \
            F.cross_entropy(out, labels)

    def step():
        if hold_output:
            out = model(x)
            loss = loss_of(out)
        else:
            loss = loss_of(model(x))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss)

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    model.cpu()
    del opt, x, labels
    torch.cuda.empty_cache()
    return peak


def run_one(name, args, tmp):
    row = {"model": name}
    stage = "build"
    try:
        model, x, extra, note = build(name, args)
        row.update(note=note, input_shape=list(x.shape))
        stage = "export_graph"
        path = os.path.join(tmp, f"{name}.json")
        t0 = time.time()
        doc = memplan_torch.export_graph(model, (x,), path, train=True)
        row["export_s"] = round(time.time() - t0, 2)
        row["ops"] = len(doc["ops"])
        kinds = {}
        for o in doc["ops"]:
            kinds[o["type"]] = kinds.get(o["type"], 0) + 1
        row["fused_attention_ops"] = kinds.get("FusedAttention", 0)
        row["rms_norm_ops"] = kinds.get("RMSNormalization", 0)
        row["dropout_ops"] = kinds.get("Dropout", 0)
        stage = "memplan plan --train"
        p = plan(args.memplan, path, extra)
        row["memplan_peak_bytes"] = plan_peak(p)
        # memplan's prediction of PyTorch's own peak for this step (its eager model), beside the planned peak
        row["memplan_predicted_pytorch_peak_bytes"] = p.get("pytorch_peak_bytes")
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            os.replace(path, os.path.join(args.keep, f"{name}.json"))
        if args.cuda:
            stage = "PyTorch peak"
            row["pytorch_peak_bytes"] = pytorch_peak(model, x)
            row["pytorch_peak_bytes_output_held"] = pytorch_peak(model, x, hold_output=True)
            row["ratio"] = round(row["memplan_peak_bytes"] / row["pytorch_peak_bytes"], 4)
            pred = row["memplan_predicted_pytorch_peak_bytes"]
            if pred:
                row["prediction_ratio"] = round(pred / row["pytorch_peak_bytes"], 4)
                row["prediction_within_10pct"] = abs(row["prediction_ratio"] - 1) <= 0.10
        row["ok"] = True
    except Exception as e:  # reported, and the other models go on
        row.update(ok=False, failed_stage=stage, error=f"{type(e).__name__}: {str(e)[:2000]}",
                   traceback=traceback.format_exc()[-3000:])
    return row


def markdown(report):
    mib = lambda b: f"{b / 2**20:.1f}" if isinstance(b, int) else "-"
    lines = [f"# export_graph: models whose training ONNX export fails ({report['device']})", "",
             f"torch {report['torch']}, transformers {report.get('transformers', '-')}, timm {report.get('timm', '-')}; "
             f"text b{report['batch']} s{report['seq']}, images b{report['image_batch']}; fp32, TF32 off, SGD, cross-entropy.", "",
             "| model | ops | FusedAttention | RMSNorm | Dropout | memplan plan MiB | memplan's PyTorch prediction MiB | PyTorch peak MiB | plan / PyTorch | prediction / PyTorch | PyTorch peak, output held MiB | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["models"]:
        status = "ok" if r["ok"] else f"failed in {r['failed_stage']}: {r['error'][:120]}"
        lines.append(f"| {r['model']} | {r.get('ops', '-')} | {r.get('fused_attention_ops', '-')} | {r.get('rms_norm_ops', '-')} | "
                     f"{r.get('dropout_ops', '-')} | {mib(r.get('memplan_peak_bytes'))} | {mib(r.get('memplan_predicted_pytorch_peak_bytes'))} | "
                     f"{mib(r.get('pytorch_peak_bytes'))} | {r.get('ratio', '-')} | {r.get('prediction_ratio', '-')} | "
                     f"{mib(r.get('pytorch_peak_bytes_output_held'))} | {status} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--out", required=True, help="output path without extension: OUT.json and OUT.md")
    ap.add_argument("--only", default="")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--image-batch", type=int, default=32)
    ap.add_argument("--no-cuda", action="store_true")
    ap.add_argument("--keep", default="", help="keep the exported graphs in this folder")
    args = ap.parse_args()
    args.cuda = torch.cuda.is_available() and not args.no_cuda
    names = [n for n in args.only.split(",") if n] or MODELS
    report = {"device": torch.cuda.get_device_name(0) if args.cuda else "CPU only (no peak measured)",
              "torch": torch.__version__, "batch": args.batch, "seq": args.seq, "image_batch": args.image_batch,
              "date": time.strftime("%Y-%m-%d"), "models": []}
    for mod in ("transformers", "timm"):
        try:
            report[mod] = __import__(mod).__version__
        except Exception:
            pass
    with tempfile.TemporaryDirectory() as tmp:
        for n in names:
            row = run_one(n, args, tmp)
            report["models"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "traceback"}), flush=True)
    with open(args.out + ".json", "w") as f:
        json.dump(report, f, indent=1)
    with open(args.out + ".md", "w") as f:
        f.write(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
