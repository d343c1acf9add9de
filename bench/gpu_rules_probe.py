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


def conv_grid(name="layers"):
    """(dtype, n, c, h, w, k, kh, kw, stride, padding, dilation, groups) of a convolution grid. "layers": the
    layers of convolution nets (stems, 3x3 and 1x1 at each stage's size, strided, grouped, depthwise, dilated,
    asymmetric, patch embeddings, 1-d), and batch sweeps; "fp32_3x3": fp32 3x3 stride-1 convolutions over channels,
    sizes and batch, where cuDNN's heuristic picks among engines of very different workspaces."""
    if name == "fp32_3x3":
        out = []
        for c in (48, 64, 76, 96, 128, 152, 192, 256, 384, 512, 768):
            for kf in (0.5, 1, 2):
                for hw in (7, 14, 28, 56, 112):
                    k = int(c * kf)
                    if c * hw * hw <= 512 * 56 * 56 and k * hw * hw <= 512 * 56 * 56:
                        out.append(("float32", 8, c, hw, hw, k, 3, 3, 1, [1, 1], 1, 1))
        for n in (1, 2, 4, 16, 32):
            for c, hw in ((64, 56), (128, 28), (96, 56), (256, 14), (128, 7), (152, 28)):
                out.append(("float32", n, c, hw, hw, c, 3, 3, 1, [1, 1], 1, 1))
        return out
    cfgs = []
    for dt in ("float32", "bfloat16"):
        def add(n, c, hw, k, ks, stride=1, groups=1, dilation=1, pad=None):
            kh, kw = ks if isinstance(ks, tuple) else (ks, ks)
            h, w = hw if isinstance(hw, tuple) else (hw, hw)
            p = pad if pad is not None else (dilation * (kh - 1) // 2, dilation * (kw - 1) // 2)
            cfgs.append((dt, n, c, h, w, k, kh, kw, stride, list(p) if isinstance(p, tuple) else [p, p], dilation,
                         groups))

        for c in (16, 32, 64, 128, 256, 512, 1024):
            for hw in (7, 14, 28, 56, 112, 224):
                if c * hw * hw <= 256 * 112 * 112:
                    add(8, c, hw, c, 3)
                    add(8, c, hw, c, 1)
                    add(8, c, hw, 2 * c, 3, stride=2)
        for c, k in ((3, 32), (3, 64), (64, 128), (128, 64), (64, 256), (256, 64), (512, 2048), (2048, 512),
                     (96, 384), (384, 96)):
            for hw in (14, 56, 112):
                add(8, c, hw, k, 3)
                add(8, c, hw, k, 1)
        for c, hw in ((3, 224), (3, 299), (12, 112), (48, 56)):
            add(8, c, hw, 64, 7, stride=2)
            add(8, c, hw, 32, 3, stride=2)
            add(8, c, hw, 96, 4, stride=4, pad=0)
            add(8, c, hw, 768, 16, stride=16, pad=0)
        for c, hw in ((64, 56), (128, 28), (256, 14), (64, 112)):
            add(8, c, hw, c, 5)
            add(8, c, hw, c, 7)
            add(8, c, hw, c, 3, dilation=2)
            add(8, c, hw, c, (1, 7))
            add(8, c, hw, c, (7, 1))
            add(8, c, hw, 2 * c, 1, stride=2)
            for g in (2, 4, 8, 32):
                add(8, c, hw, c, 3, groups=g)
            for ks in (3, 5, 7):
                add(8, c, hw, c, ks, groups=c)
            add(8, c, hw, c, 3, stride=2, groups=c)
        for n in (1, 2, 4, 16, 32):
            add(n, 64, 56, 64, 3)
            add(n, 128, 28, 128, 3)
            add(n, 256, 56, 64, 1)
            add(n, 3, 224, 64, 7, stride=2)
        for c, l in ((512, 256), (1536, 256), (256, 1024)):  # 1-d depthwise (state-space models' short conv)
            cfgs.append((dt, 4, c, 1, l, c, 1, 4, 1, [0, 3], 1, c))
            cfgs.append((dt, 4, c, 1, l, c, 1, 3, 1, [0, 1], 1, 1))
    return cfgs


def conv_workspaces(emit=None, grid="layers", kernels=True):
    """Per convolution of conv_grid: the transient bytes (the most allocated within the op less allocated after
    it) of the forward, the input gradient and the weight gradient, each run alone as aten.convolution /
    aten.convolution_backward with one output, the second time (the first builds and caches cuDNN's plan),
    benchmark mode off, TF32 off (the zoo's settings); the backend PyTorch selects, and the CUDA kernels each pass
    launched (torch.profiler), which name cuDNN's engine."""
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    aten = torch.ops.aten
    rows, calls = [], []
    for dt, n, c, h, w, k, kh, kw, stride, pad, dil, groups in conv_grid(grid):
        dtype = getattr(torch, dt)
        x = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
        wt = torch.randn(k, c // groups, kh, kw, device="cuda", dtype=dtype)
        st, dl = [stride, stride], [dil, dil]
        if h == 1:  # a 1-d convolution as PyTorch runs it: (n, c, l) viewed as (n, c, 1, l)
            x, wt, st, dl = x[:, :, 0], wt[:, :, 0], [stride], [dil]
            pad = [pad[1]]
        y = aten.convolution(x, wt, None, st, pad, dl, False, [0] * len(st), groups)
        go = torch.randn_like(y)
        passes = {
            "forward": lambda: aten.convolution(x, wt, None, st, pad, dl, False, [0] * len(st), groups),
            "backward_data": lambda: aten.convolution_backward(go, x, wt, None, st, pad, dl, False, [0] * len(st),
                                                               groups, [True, False, False]),
            "backward_filter": lambda: aten.convolution_backward(go, x, wt, None, st, pad, dl, False,
                                                                 [0] * len(st), groups, [False, True, False]),
        }
        row = {"dtype": dt, "n": n, "c": c, "h": h, "w": w, "k": k, "kh": kh, "kw": kw, "stride": stride,
               "padding": pad, "dilation": dil, "groups": groups, "x_bytes": x.numel() * x.element_size(),
               "y_bytes": y.numel() * y.element_size(), "w_bytes": wt.numel() * wt.element_size(),
               "backend": str(torch._C._select_conv_backend(x, wt, None, st, pad, dl, False, [0] * len(st),
                                                            groups)).split(".")[-1]}
        for name, fn in passes.items():
            try:
                fn()  # builds the plan
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                out = fn()
                after = torch.cuda.memory_allocated()
                row[name] = torch.cuda.max_memory_allocated() - after
                del out
            except Exception as e:  # noqa: BLE001 - recorded per pass
                row[name] = None
                row[name + "_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        rows.append(row)
        calls.append(passes)
        if emit:
            emit(row)
        del y, go
    try:
        if kernels:
            _conv_kernels(rows, calls)
    except Exception as e:  # noqa: BLE001 - the kernels are a description, the bytes the measurement
        rows.append({"kernels_error": f"{type(e).__name__}: {str(e)[:300]}"})
    return rows


def _conv_kernels(rows, calls):
    """The CUDA kernels each pass launched, one profiler session over all (the plans are cached: no engine search
    runs), each pass inside a record_function range."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i, passes in enumerate(calls):
            for name, fn in passes.items():
                if rows[i].get(name) is not None:
                    with record_function(f"probe:{i}:{name}"):
                        fn()
        torch.cuda.synchronize()

    def kernels(ev, acc):
        for kk in getattr(ev, "kernels", []) or []:
            acc.add(kk.name)
        for ch in ev.cpu_children:
            if str(getattr(ch, "device_type", "")).endswith("CUDA"):
                acc.add(ch.name)
            kernels(ch, acc)
        return acc

    for ev in prof.events():
        if ev.name.startswith("probe:"):
            _, i, name = ev.name.split(":")
            rows[int(i)][name + "_kernels"] = sorted(kernels(ev, set()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--only", choices=["conv"], help="run one part")
    ap.add_argument("--conv-grid", default="layers", choices=["layers", "fp32_3x3"])
    a = ap.parse_args()
    if a.only == "conv":  # one JSON object a line, each as it is measured, the kernels last
        def emit(obj):
            print(json.dumps(obj), flush=True)

        emit({"versions": versions()})
        for i, row in enumerate(conv_workspaces(emit, a.conv_grid, kernels=a.conv_grid == "layers")):
            emit({"index": i, **{k: v for k, v in row.items() if k.endswith("_kernels")}})
        return
    out = {"versions": versions(), "cublas": cublas_workspaces(), "sdpa": sdpa_grid(a.gpu),
           "rnn_reserve": rnn_reserve(), "conv": conv_workspaces()}
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
