"""Measures on a CUDA GPU the device rules estimate_step states (python/memplan_torch/device_rules.py):
the cuBLAS workspaces (bytes taken through the caching allocator by the first GEMM of the main thread and of the
autograd thread), the SDPA kernel PyTorch picks (torch._fused_sdp_choice) against device_rules.sdpa_backend over a
grid of dtypes, head sizes, masks, causality, grouped heads and dropout, and the cuDNN RNN reserve per layer.

    python3 bench/gpu_rules_probe.py --gpu h100 > probe.json
"""
import argparse
import itertools
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))


def versions():
    import torch

    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "device": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0))}
    for mod in ("transformers", "timm", "torchvision"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            out[mod] = None
    return out


def cublas_workspaces():
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(256, 256, device="cuda", requires_grad=True)
    base = torch.cuda.memory_allocated()
    y = a @ a
    torch.cuda.synchronize()
    after_fwd = torch.cuda.memory_allocated() - base - y.untyped_storage().nbytes()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        z = a @ a
    torch.cuda.synchronize()
    after_bf16 = torch.cuda.memory_allocated() - base - y.untyped_storage().nbytes() - z.untyped_storage().nbytes()
    before_bwd = torch.cuda.memory_allocated()
    y.sum().backward()
    torch.cuda.synchronize()
    after_bwd = torch.cuda.memory_allocated() - before_bwd - a.grad.untyped_storage().nbytes()
    return {"forward_first_gemm_bytes": after_fwd, "after_bf16_gemm_bytes": after_bf16,
            "backward_first_gemm_bytes": after_bwd}


def sdpa_grid(gpu):
    import torch

    from memplan_torch.device_rules import gpu_rules, sdpa_backend

    rules = gpu_rules(gpu)
    names = {}
    for n in dir(torch.nn.attention.SDPBackend):
        v = getattr(torch.nn.attention.SDPBackend, n)
        if isinstance(v, torch.nn.attention.SDPBackend):
            names[int(v.value)] = n.lower()
    rows, wrong = [], 0
    for dtype, d, mask, causal, gqa, dropout, sq, layout in itertools.product(
            (torch.float32, torch.bfloat16), (32, 64, 80, 128, 160, 256),
            (None, "bool", "float", "bool_b1"), (False, True), (False, True), (0.0, 0.1), (128, 200),
            ("bhsd", "bshd")):
        if mask is not None and causal:
            continue
        b, h = 2, 4
        hk = 2 if gqa else 4
        def make(heads):
            if layout == "bshd":  # (batch, seq, heads, dim) memory seen as (batch, heads, seq, dim)
                return torch.randn(b, sq, heads, d, device="cuda", dtype=dtype).transpose(1, 2).requires_grad_()
            return torch.randn(b, heads, sq, d, device="cuda", dtype=dtype, requires_grad=True)

        q, k, v = make(h), make(hk), make(hk)
        m = None
        if mask == "bool":
            m = torch.ones(b, 1, sq, sq, device="cuda", dtype=torch.bool)
        elif mask == "bool_b1":
            m = torch.ones(1, 1, sq, sq, device="cuda", dtype=torch.bool)
        elif mask == "float":
            m = torch.zeros(b, 1, sq, sq, device="cuda", dtype=dtype)
        try:
            got = names.get(int(torch._fused_sdp_choice(q, k, v, m, dropout, causal, scale=None, enable_gqa=gqa)), "?")
        except Exception as e:  # noqa: BLE001
            got = "error:" + type(e).__name__
        pred = sdpa_backend(rules, q, k, v, m, dropout, causal, gqa)
        key = {"dtype": str(dtype)[6:], "head_dim": d, "mask": mask, "causal": causal, "gqa": gqa,
               "dropout": dropout, "seq": sq, "layout": layout, "pytorch": got, "rule": pred}
        if not got.startswith(pred.split("_")[0]):
            wrong += 1
        rows.append(key)
    return {"cases": len(rows), "mismatches": wrong, "rows": rows}


def rnn_reserve():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func._overloadpacket.__name__ == "_cudnn_rnn":
                seen.append(out[3].numel() * out[3].element_size())
            return out

    rows = []
    for kind, inp, hid, layers, seq, batch, bidir, dtype in itertools.product(
            ("LSTM", "GRU", "RNN"), (256,), (256, 512), (1, 2), (64, 256), (4, 16), (False, True),
            (torch.float32, torch.bfloat16)):
        rnn = getattr(torch.nn, kind)(inp, hid, num_layers=layers, batch_first=True, bidirectional=bidir).cuda()
        x = torch.randn(batch, seq, inp, device="cuda", requires_grad=True)
        seen.clear()
        with Spy(), torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
            rnn(x)
        rows.append({"kind": kind, "input": inp, "hidden": hid, "layers": layers, "seq": seq, "batch": batch,
                     "bidirectional": bidir, "dtype": str(dtype)[6:], "reserve_bytes": seen[:1]})
    return rows


def conv_workspaces():
    """Transient bytes (max allocated within the op less allocated after it) of cuDNN convolutions, forward and
    backward, over a grid of shapes (benchmark mode off, TF32 off: the zoo's settings)."""
    import torch

    torch.backends.cudnn.allow_tf32 = False
    rows = []
    for dtype, (n, c, hw, k, ks, stride, groups) in itertools.product(
            (torch.float32, torch.bfloat16),
            ((8, 3, 224, 64, 3, 1, 1), (8, 64, 224, 64, 3, 1, 1), (8, 64, 112, 128, 3, 1, 1),
             (8, 128, 112, 128, 3, 1, 1), (8, 128, 56, 256, 3, 1, 1), (8, 256, 56, 256, 3, 1, 1),
             (8, 256, 28, 512, 3, 1, 1), (8, 512, 28, 512, 3, 1, 1), (8, 512, 14, 512, 3, 1, 1),
             (8, 3, 224, 64, 7, 2, 1), (8, 64, 56, 64, 1, 1, 1), (8, 256, 56, 64, 1, 1, 1),
             (8, 64, 56, 256, 1, 1, 1), (8, 32, 112, 32, 3, 1, 32), (8, 96, 112, 96, 3, 2, 96),
             (8, 144, 56, 144, 3, 1, 144), (8, 240, 28, 240, 5, 1, 240), (8, 3, 224, 96, 4, 4, 1),
             (8, 96, 56, 96, 7, 1, 96), (32, 64, 56, 64, 3, 1, 1), (2, 64, 224, 64, 3, 1, 1))):
        conv = torch.nn.Conv2d(c, k, ks, stride=stride, padding=ks // 2, groups=groups, bias=False).cuda()
        x = torch.randn(n, c, hw, hw, device="cuda", requires_grad=True)
        row = {"dtype": str(dtype)[6:], "n": n, "c": c, "hw": hw, "k": k, "kernel": ks, "stride": stride,
               "groups": groups}
        with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
            for _ in range(2):  # the first call may choose differently; the second is the steady one
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                y = conv(x)
                torch.cuda.synchronize()
                after = torch.cuda.memory_allocated()
                row["forward_transient"] = torch.cuda.max_memory_allocated() - after
                g = torch.ones_like(y)
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                gx, gw = torch.autograd.grad(y, (x, conv.weight), g)
                torch.cuda.synchronize()
                after = torch.cuda.memory_allocated()
                row["backward_transient"] = torch.cuda.max_memory_allocated() - after
                del y, g, gx, gw
        row["input_bytes"] = x.numel() * (4 if dtype == torch.float32 else 2)
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--only", choices=["conv"], help="run one part")
    a = ap.parse_args()
    if a.only == "conv":
        json.dump({"versions": versions(), "conv": conv_workspaces()}, sys.stdout, indent=1)
        return
    out = {"versions": versions(), "cublas": cublas_workspaces(), "sdpa": sdpa_grid(a.gpu),
           "rnn_reserve": rnn_reserve(), "conv": conv_workspaces()}
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
