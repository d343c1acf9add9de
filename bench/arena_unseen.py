#!/usr/bin/env python3
"""Arena vs aliased lower bound on inference models NOT in samples/ (issue 18: "within 1% of the bound on every model
memplan is tested on, including unseen ones"): torchvision DenseNet-169 and ConvNeXt-T, timm ViT-S/16, a T5 encoder
(transformers, t5-small's config), torchvision EfficientNet-B0 and RegNetY-400MF; random weights, eval mode,
TorchScript exporter (opset 17), symbolic batch (and seq), weights stripped (strip_and_save). Each is then planned by
`memplan analyze --json` at default settings and again with --exact-pack-seconds 20 --exact-pack-nodes 20000000.

Usage: bench/arena_unseen.py [--memplan build/memplan] [--dir /tmp/memplan_unseen] [--out bench/results/arena_unseen_2026-11-26]
                             [--samples] [--baseline OLD_MEMPLAN]
--samples also plans the sample inference models (samples/, default settings only); --baseline adds the arena another
memplan binary plans at the same settings (e.g. one built before a planner change).
"""
import argparse
import io
import json
import os
import subprocess
import sys
import warnings

sys.path.insert(0, os.path.dirname(__file__))


def export(model, args, names, axes, path):
    import onnx
    import torch
    from export_transformers import strip_and_save
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, buf, input_names=names, output_names=["out"], dynamic_axes=axes, opset_version=17,
                          do_constant_folding=True, dynamo=False)
    strip_and_save(onnx.load_from_string(buf.getvalue()), path)


def export_all(d):
    import torch
    import torchvision
    import timm
    import transformers
    torch.manual_seed(0)
    os.makedirs(d, exist_ok=True)
    img = torch.randn(1, 3, 224, 224)
    vision = {"densenet169": torchvision.models.densenet169(), "convnext_tiny": torchvision.models.convnext_tiny(),
              "efficientnet_b0": torchvision.models.efficientnet_b0(), "regnet_y_400mf": torchvision.models.regnet_y_400mf(),
              "vit_small_patch16_224": timm.create_model("vit_small_patch16_224", pretrained=False)}
    out = []
    for name, m in vision.items():
        path = os.path.join(d, name + ".onnx")
        if not os.path.exists(path):
            export(m.eval(), (img,), ["input"], {"input": {0: "batch"}, "out": {0: "batch"}}, path)
        out.append((path, "batch=8"))
    cfg = transformers.T5Config(d_model=512, d_ff=2048, num_layers=6, num_heads=8, d_kv=64, vocab_size=32128)
    t5 = transformers.T5EncoderModel(cfg).eval()

    class Enc(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(input_ids=ids).last_hidden_state

    path = os.path.join(d, "t5_small_encoder.onnx")
    if not os.path.exists(path):
        export(Enc(t5), (torch.ones(1, 16, dtype=torch.long),), ["input_ids"], {"input_ids": {0: "batch", 1: "seq"}, "out": {0: "batch", 1: "seq"}}, path)
    out.append((path, "batch=8,seq=256"))
    return out


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = [(f"samples/models/{m}.dyn.onnx", "batch=32") for m in ("resnet18", "resnet50", "mobilenet_v2", "vgg16", "densenet121")] + [
    ("samples/models/squeezenet1_1.onnx", ""), ("samples/models/bert_base.dyn.onnx", "batch=8,seq=128"),
    ("samples/models/distilbert.dyn.onnx", "batch=8,seq=128")] + [(f"samples/models/{m}.onnx", "") for m in ("tiny_cnn", "tiny_densenet", "tiny_gpt", "tiny_mlp")] + [
    (f"samples/transformers/{m}.dynamo.onnx", "batch=8,seq=256") for m in ("bert_small", "gpt2_small", "llama_gqa", "t5_encoder", "phi_small", "qwen2_gqa")] + [
    ("samples/transformers/deit_tiny.dynamo.onnx", "batch=32")]


def analyze(memplan, model, dims, extra):
    cmd = [memplan, "analyze", model, "--json"] + extra
    for x in filter(None, dims.split(",")):
        cmd += ["--dim", x]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{model}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default="build/memplan")
    ap.add_argument("--dir", default="/tmp/memplan_unseen")
    ap.add_argument("--out", default="bench/results/arena_unseen_2026-11-26")
    ap.add_argument("--samples", action="store_true")
    ap.add_argument("--baseline", default="")
    a = ap.parse_args()
    rows = []
    runs = [(p, d, s) for p, d in export_all(a.dir) for s in ("default", "long")]
    if a.samples:
        runs += [(os.path.join(ROOT, p), d, "default") for p, d in SAMPLES]
    settings = {"default": [], "long": ["--exact-pack-seconds", "20", "--exact-pack-nodes", "20000000"]}
    for path, dims, label in runs:
        extra = settings[label]
        j = analyze(a.memplan, path, dims, extra)
        bound = j.get("aliased_lower_bound_bytes") or j["lower_bound_bytes"]
        row = {"model": os.path.basename(path), "dims": dims, "settings": label, "ops": j.get("ops"), "arena_bytes": j["arena_bytes"],
               "aliased_lower_bound_bytes": bound, "gap": j["arena_bytes"] / bound - 1 if bound else 0.0,
               "arena_optimal": j.get("arena_optimal"), "arena_gap": j.get("arena_gap"), "plan_seconds": j.get("plan_seconds"),
               "schedule": j.get("schedule", {}).get("method") if isinstance(j.get("schedule"), dict) else None}
        if a.baseline:
            row["baseline_arena_bytes"] = analyze(a.baseline, path, dims, extra)["arena_bytes"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    with open(a.out + ".json", "w") as f:
        json.dump(rows, f, indent=1)
    base = "baseline arena MB | " if a.baseline else ""
    lines = [f"| model | dims | settings | ops | {base}arena MB | aliased bound MB | arena / bound | arena_optimal | arena_gap | plan s |",
             "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if a.baseline else "")]
    for r in rows:
        old = f"{r['baseline_arena_bytes'] / 1e6:.2f} | " if a.baseline else ""
        lines.append(f"| {r['model']} | {r['dims']} | {r['settings']} | {r['ops']} | {old}{r['arena_bytes'] / 1e6:.2f} | "
                     f"{r['aliased_lower_bound_bytes'] / 1e6:.2f} | {1 + r['gap']:.4f} | {r['arena_optimal']} | {r['arena_gap']:.4f} | {r['plan_seconds']:.3f} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
