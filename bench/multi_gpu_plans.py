#!/usr/bin/env python3
"""Per-rank plans (memplan plan --gpus) of a GPT-2-size (124M, tied embeddings, dropout) and a Llama-style (~1.1B,
GQA, RMSNorm, SwiGLU) model at several (N, ZeRO, TP, PP), next to DeepSpeed's model-state and Megatron's
activation formulas. The models are written here as ONNX graphs whose weights are external-data references
(memplan plans from dims only) into a temporary folder; only this script and its results are kept.

usage: multi_gpu_plans.py MEMPLAN [--out results.md] [--batch 8] [--seq 1024]
       multi_gpu_plans.py MEMPLAN --fit [--out results.md] [--global-batch 32] [--seq 1024] [--max-gpus 8]
  --fit: `memplan fit --max-gpus` (the fewest GPUs and the layout that fit) at per-GPU budgets, the models with a
  symbolic batch that each layout splits into data-parallel ranks x microbatches.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import onnx
from onnx import TensorProto, helper

from onnx_graph import OnnxGraph


CONFIGS = {"gpt2": dict(V=50257, D=768, H=12, L=12, F=3072, KV=12), "llama": dict(V=32000, D=2048, H=32, L=16, F=5632, KV=8)}


def build(kind, B, T, path, cfg=None):
    """Writes the model; B an int fixes the batch, a string names a symbolic batch dim (the Reshape shapes copy
    dim 0 and the GQA Expand broadcasts it), as `fit --max-gpus` needs to split the batch per layout. `cfg` overrides
    the size (V, D, H, L, F, KV) of `kind`'s architecture."""
    cfg = dict(CONFIGS[kind], **(cfg or {}))
    V, D, H, L, F, KV = (cfg[k] for k in ("V", "D", "H", "L", "F", "KV"))
    dh = D // H
    Bs = 0 if isinstance(B, str) else B  # Reshape: 0 copies the input's dim
    g = OnnxGraph("weights.bin")
    nodes, inits, weight, const, node = g.nodes, g.inits, g.weight, g.const, g.node

    def linear(x, name, din, dout, bias=True):
        y = node("MatMul", [x, weight(name + ".weight", [din, dout])], name=name + "/MatMul")
        return node("Add", [y, weight(name + ".bias", [dout])], name=name + "/Add") if bias else y

    def dropout(x, p):
        if kind != "gpt2":
            return x
        return node("Dropout", [x, const(p + ".ratio", TensorProto.FLOAT, [], [0.1]), const(p + ".mode", TensorProto.BOOL, [], [True])], name=p + "/Dropout")

    def norm(x, p):
        if kind == "gpt2":
            return node("LayerNormalization", [x, weight(p + ".weight", [D]), weight(p + ".bias", [D])], name=p + "/LayerNorm", axis=-1, epsilon=1e-5)
        ms = node("ReduceMean", [node("Mul", [x, x], name=p + "/sq"), const(p + ".axes", TensorProto.INT64, [1], [-1])], name=p + "/mean", keepdims=1)
        r = node("Reciprocal", [node("Sqrt", [node("Add", [ms, const(p + ".eps", TensorProto.FLOAT, [], [1e-6])], name=p + "/eps")], name=p + "/sqrt")], name=p + "/rcp")
        return node("Mul", [node("Mul", [x, r], name=p + "/scale"), weight(p + ".weight", [D])], name=p + "/w")

    heads = const("heads_shape", TensorProto.INT64, [4], [Bs, T, H, dh])
    kv_heads = const("kv_shape", TensorProto.INT64, [4], [Bs, T, KV, dh])
    kv5 = const("kv5_shape", TensorProto.INT64, [5], [Bs or 1, KV, H // KV, T, dh])  # Expand: 1 broadcasts
    kv4 = const("kv4_shape", TensorProto.INT64, [4], [Bs, H, T, dh])
    merged = const("merged_shape", TensorProto.INT64, [3], [Bs, T, D])
    scale = const("attn_scale", TensorProto.FLOAT, [], [float(dh) ** 0.5])
    ids = "input_ids"
    x = node("Gather", [weight("wte.weight", [V, D]), ids], name="wte/Gather")
    if kind == "gpt2":
        x = dropout(node("Add", [x, weight("wpe.weight", [T, D])], name="wpe/Add"), "emb")
    for i in range(L):
        p = f"layers.{i}"
        h = norm(x, p + ".ln_1")
        q = node("Transpose", [node("Reshape", [linear(h, p + ".attn.q", D, D, kind == "gpt2"), heads])], perm=[0, 2, 1, 3])
        kvs = []
        for nm, perm in (("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            t = node("Reshape", [linear(h, f"{p}.attn.{nm}", D, KV * dh, kind == "gpt2"), heads if KV == H else kv_heads])
            if KV != H:  # GQA: each key/value head serves H / KV query heads (repeat_kv)
                t = node("Transpose", [t], perm=[0, 2, 1, 3])
                t = node("Reshape", [node("Expand", [node("Unsqueeze", [t, const(f"{p}.{nm}.ax", TensorProto.INT64, [1], [2])]), kv5]), kv4])
                t = node("Transpose", [t], perm=[0, 1, 3, 2]) if nm == "k" else t
            else:
                t = node("Transpose", [t], perm=perm)
            kvs.append(t)
        att = dropout(node("Softmax", [node("Div", [node("MatMul", [q, kvs[0]]), scale])], axis=-1), p + ".attn.probs")
        o = node("Reshape", [node("Transpose", [node("MatMul", [att, kvs[1]])], perm=[0, 2, 1, 3]), merged])
        x = node("Add", [x, dropout(linear(o, p + ".attn.o", D, D, kind == "gpt2"), p + ".attn.out")], name=p + "/residual1")
        h = norm(x, p + ".ln_2")
        if kind == "gpt2":
            f = linear(h, p + ".mlp.up", D, F)
            act = node("Gelu", [f], name=p + "/mlp/Gelu") if False else node(
                "Mul", [node("Mul", [f, node("Add", [node("Erf", [node("Div", [f, const(p + ".sqrt2", TensorProto.FLOAT, [], [2.0 ** 0.5])])]),
                                                      const(p + ".one", TensorProto.FLOAT, [], [1.0])])]), const(p + ".half", TensorProto.FLOAT, [], [0.5])])
        else:
            gate = linear(h, p + ".mlp.gate", D, F, False)
            act = node("Mul", [node("Mul", [gate, node("Sigmoid", [gate])]), linear(h, p + ".mlp.up", D, F, False)])
        x = node("Add", [x, dropout(linear(act, p + ".mlp.down", F, D, kind == "gpt2"), p + ".mlp.out")], name=p + "/residual2")
    h = norm(x, "ln_f")
    head = node("Transpose", ["wte.weight"], perm=[1, 0], name="lm_head/tied") if kind == "gpt2" else weight("lm_head.weight", [D, V])
    node("MatMul", [h, head], ["logits"], name="lm_head/MatMul")
    graph = helper.make_graph(nodes, f"{kind}_b{B}_t{T}", [helper.make_tensor_value_info(ids, TensorProto.INT64, [B, T])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, T, V])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="memplan bench/multi_gpu_plans.py")
    model.ir_version = 8
    onnx.save(model, path)
    return cfg


def mib(b):
    return f"{b / 2**20:,.1f}"


def machine():
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores (shared with other jobs)"


FIT_BUDGETS = {"gpt2": ["24GiB", "4GiB", "2GiB"], "llama": ["80GiB", "16GiB", "8GiB"]}


def fit_tables(a):
    out = [f"# fit --max-gpus: the fewest GPUs and the layout that fit, {a.global_batch} x {a.seq} tokens per step, Adam, fp32 (2026-11-24)\n",
           f"Generated by `bench/multi_gpu_plans.py build/memplan --fit` (CPU planning only: no GPU run). `memplan fit MODEL --train "
           f"--optimizer adam --loss ce --dim batch={a.global_batch} --gpus {a.max_gpus} --budget B`: each layout of N = data parallel x tp x "
           "pp GPUs splits the step's samples into data-parallel ranks x microbatches; every rank role is planned under the per-GPU "
           "budget (total device memory, 69 MiB of libraries included; remat and swap per rank), and the fewest GPUs with a fitting "
           "layout win, the least estimated step time among that count's layouts choosing (docs/multi-gpu.md, 'fit --max-gpus'). "
           "Step times are the cost model's (H100-like placeholder profile, 450 GB/s interconnect), not measured. "
           f"Search times (wall clock of each `fit`): {machine()}.\n"]
    summary = ["| model | budget/GPU | GPUs | layout | M x microbatch | peak/GPU MiB | model state MiB | step ms | comm MiB/step | "
               "layouts planned | not planned (model state) | role plans reused | search s |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    details = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("gpt2", "llama"):
            path = os.path.join(tmp, kind + ".onnx")
            cfg = build(kind, "batch", a.seq, path)
            for budget in FIT_BUDGETS[kind]:
                cmd = [a.memplan, "fit", path, "--train", "--optimizer", "adam", "--loss", "ce", "--dim", f"batch={a.global_batch}",
                       "--max-gpus", str(a.max_gpus), "--budget", budget, "--json"]
                t0 = time.time()
                r = subprocess.run(cmd, capture_output=True, text=True)
                took = time.time() - t0
                print(kind, budget, f"exit {r.returncode} in {took:.1f} s", file=sys.stderr, flush=True)
                if not r.stdout.strip():
                    summary.append(f"| {kind} | {budget} | error: {r.stderr.strip()[:160]} |")
                    continue
                j = json.loads(r.stdout)
                c = j["chosen"]
                if c is None:
                    l = j["least"]
                    summary.append(f"| {kind} | {budget} | none within {a.max_gpus} | least: {l['name']} | {l['microbatches']} x {l['microbatch']} | "
                                   f"{'>=' if l['peak_is_lower_bound'] else ''}{mib(l['peak_bytes'])} | - | - | - | {j['planned_layouts']} | "
                                   f"{j['pruned_layouts']} | {j['role_plans_reused']} | {took:.1f} |")
                else:
                    summary.append(f"| {kind} | {budget} | {c['gpus']} | {c['name']} | {c['microbatches']} x {c['microbatch']} | {mib(c['peak_bytes'])} | "
                                   f"{mib(c['model_state_bytes'])} | {1e3 * c['estimated_step_seconds']:,.1f} | {mib(c['communication_bytes_per_step'])} | "
                                   f"{j['planned_layouts']} | {j['pruned_layouts']} | {j['role_plans_reused']} | {took:.1f} |")
                n = j["gpus"] or j["searched_gpus"]
                details.append(f"\n### {kind} ({cfg['L']} layers, hidden {cfg['D']}), budget {budget} per GPU: layouts of {n} GPU(s)\n")
                details.append("| layout | M x microbatch | fits | peak/GPU MiB | model state MiB | activations MiB | step ms | comm MiB/step | note |")
                details.append("|---|---|---|---|---|---|---|---|---|")
                for x in j["candidates"]:
                    if x["gpus"] != n:
                        continue
                    mark = " (chosen)" if c is not None and x["name"] == c["name"] and x["microbatches"] == c["microbatches"] else ""
                    peak = (">=" if x["peak_is_lower_bound"] else "") + mib(x["peak_bytes"])
                    if x["planned"]:
                        cols = [mib(x["model_state_bytes"]), mib(x["activation_bytes"]), f"{1e3 * x['estimated_step_seconds']:,.1f}",
                                mib(x["communication_bytes_per_step"])]
                    else:
                        cols = ["-", "-", "-", "-"]
                    details.append(f"| {x['name']}{mark} | {x['microbatches']} x {x['microbatch']} | {'yes' if x['fits'] else 'no'} | {peak} | "
                                   + " | ".join(cols) + f" | {x['note']} |")
    return "\n".join(out + summary + details) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("memplan")
    ap.add_argument("--out", default="-")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--fit", action="store_true", help="fit --max-gpus tables instead of per-rank plans")
    ap.add_argument("--global-batch", type=int, default=32)
    ap.add_argument("--max-gpus", type=int, default=8)
    a = ap.parse_args()
    if a.fit:
        text = fit_tables(a)
        if a.out == "-":
            print(text)
        else:
            with open(a.out, "w") as f:
                f.write(text)
        return
    layouts = [(1, 0, 1, 1, 1), (8, 0, 1, 1, 1), (8, 1, 1, 1, 1), (8, 2, 1, 1, 1), (8, 3, 1, 1, 1), (8, 1, 1, 2, 4), (8, 0, 1, 4, 8),
               (2, 0, 2, 1, 1), (4, 0, 4, 1, 1), (2, 0, "2+sp", 1, 1), (4, 0, "4+sp", 1, 1), (8, 1, "2+sp", 2, 4)]
    out = []
    out.append(f"# Per-rank plans, {a.batch} x {a.seq} tokens per microbatch, Adam, fp32 (2026-11-24)\n")
    out.append("Generated by `bench/multi_gpu_plans.py build/memplan` (CPU planning only: no GPU run). Model state formula: DeepSpeed's "
               "fp32 Adam form (weights 4, gradients 4, Adam moments 8 bytes per parameter; ZeRO-1 8Ψ + 8Ψ/N, ZeRO-2 4Ψ + 12Ψ/N, ZeRO-3 16Ψ/N). "
               "Activation formula: Megatron-LM's sbh(34 + 5as/h) per layer (fp16, no flash attention; with TP t sbh(10 + 24/t + 5as/(ht)), with TP and sequence parallelism sbh/t (34 + 5as/h)) times layers on the rank and "
               "microbatches in flight; memplan's column is fp32 with attention fused (FlashAttention-style: no s^2 terms), "
               "so the two differ by design (docs/multi-gpu.md, 'Against the formulas').\n")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("gpt2", "llama"):
            path = os.path.join(tmp, kind + ".onnx")
            cfg = build(kind, a.batch, a.seq, path)
            out.append(f"\n## {kind}: {cfg}\n")
            out.append("| N | ZeRO | TP | PP | M | role | peak MiB | model state MiB | formula MiB | activations MiB | Megatron formula MiB | arena MiB | comm MiB/step | valid |")
            out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
            for (n, z, t, p, m) in layouts:
                sp = str(t).endswith("+sp")
                tp = int(str(t).split("+")[0])
                cmd = [a.memplan, "plan", path, "--train", "--optimizer", "adam", "--loss", "ce", "--gpus", str(n), "--zero", str(z),
                       "--tp", str(tp), "--pp", str(p), "--microbatches", str(m), "--json"] + (["--sequence-parallel"] if sp else [])
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    out.append(f"| {n} | {z} | {t} | {p} | {m} | error: {r.stderr.strip()[:120]} |")
                    continue
                j = json.loads(r.stdout)
                psi = j["parameters"]
                dp = j["layout"]["data_parallel"]
                for rk in j["ranks"]:
                    # Formula over the parameters the stage holds (pipeline or tensor parallel: its own weights' count, unsharded by ZeRO).
                    stage_psi = rk["weight_bytes"] / 4 * (dp if z == 3 else 1) if p > 1 or tp > 1 else psi
                    f = {0: 16 * stage_psi, 1: 8 * stage_psi + 8 * stage_psi / dp, 2: 4 * stage_psi + 12 * stage_psi / dp, 3: 16 * stage_psi / dp}[z]
                    s, b, h, heads = a.seq, a.batch, cfg["D"], cfg["H"]
                    layers = cfg["L"] / p
                    # Korthikanti et al. 2022: eq. 1, eq. 2 with tensor parallelism, eq. 3 with sequence parallelism too.
                    per = (34 + 5 * heads * s / h) / tp if sp else 10 + 24 / tp + 5 * heads * s / (h * tp)
                    meg = layers * s * b * h * per * rk["in_flight_microbatches"]
                    out.append(f"| {n} | {z} | {t} | {p} | {m} | {rk['role']} | {mib(rk['peak_bytes'])} | {mib(rk['model_state_bytes'])} | {mib(f)} | "
                               f"{mib(rk['activation_bytes'])} | {mib(meg)} | {mib(rk['arena_bytes'])} | "
                               f"{mib(rk['communication_bytes_per_step']['total'])} | {rk['plan_valid']} |")
                print(kind, n, z, t, p, m, "done", file=sys.stderr, flush=True)
    text = "\n".join(out) + "\n"
    if a.out == "-":
        print(text)
    else:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
