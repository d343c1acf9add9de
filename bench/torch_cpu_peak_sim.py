#!/usr/bin/env python3
"""What PyTorch's CUDA caching allocator would report as max_memory_allocated for one training step, simulated on
the CPU: every storage an ATen op creates over the step (a TorchDispatchMode sees each op's outputs; a weak
reference to the storage sees it freed), each rounded up to 512 bytes as the CUDA allocator rounds blocks, summed
with the storages alive when the step starts (parameters, buffers, the batch, the labels).

The CPU runs other kernels than CUDA where PyTorch's dispatch differs by device; the simulation runs the CUDA
ones' memory behaviour instead (sm80+, fp32 with TF32 off, as bench/export_graph_models.py measures):
- dropout: CUDA takes native_dropout (output + a bool mask, saved), the CPU multiplies by a float noise tensor
  (aten/src/ATen/native/Dropout.cpp is_fused_kernel_acceptable): F.dropout runs native_dropout here.
- F.rms_norm: CUDA runs one _fused_rms_norm kernel (y, and an fp32 rstd saved with the input), the CPU the
  decomposition (pow, mean, add, rsqrt, mul, mul, their intermediates saved): simulated by its allocations.
- scaled_dot_product_attention: the backend CUDA's select_sdp_backend (sdp_utils.cpp) would pick for the call:
  flash and cuDNN take 16-bit inputs only; the memory-efficient kernel takes fp32 but not grouped-query heads
  (check_batch_size_and_num_heads_dense<false>), so an fp32 GQA call runs the math backend
  (_scaled_dot_product_attention_math: q * sqrt(scale), repeat_interleave of k and v, matmul with
  k^T * sqrt(scale), the causal mask added, softmax, dropout, matmul), mirrored here op for op with CUDA's
  dropout. The memory-efficient kernel is simulated by what it allocates: the output and a logsumexp of
  [B, H, ceil(S/32)*32] fp32 in the forward (saved with q, k, v), grad q, k, v and a [B, H, S] fp32 delta in the
  backward; its arithmetic runs untracked.
Kernel-internal workspaces (cuBLAS: `memplan plan` adds --pytorch-workspace, 65 MiB, to its prediction) are not
seen: compare the simulation with pytorch_peak_bytes - pytorch_workspace_bytes.

usage: torch_cpu_peak_sim.py [--only NAME,...] [--memplan build/memplan] [--out PATH] [--top N]
  Models are bench/export_graph_models.py's (built by its build()). With --memplan each model is also exported
  (memplan_torch.export_graph) and planned, and memplan's prediction is printed beside the simulation.
"""
import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

BLOCK = 512


def rounded(n):
    return max(BLOCK, (n + BLOCK - 1) // BLOCK * BLOCK) if n else 0


class StorageTracker(TorchDispatchMode):
    """Live storage bytes over the ops run under it; the peak and what was alive at it."""

    def __init__(self):
        super().__init__()
        self.live = {}      # storage key -> (bytes, what made it)
        self.by_ptr = {}    # data_ptr -> storage key
        self.next_key = 0
        self.current = 0
        self.peak = 0
        self.peak_live = []
        self.peak_at = ""
        self.suspended = 0
        self.ops = 0

    def add(self, t, label):
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or self.suspended:
            return
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if st.nbytes() == 0 or ptr in self.by_ptr:
            return
        key = self.next_key
        self.next_key += 1
        b = rounded(st.nbytes())
        self.live[key] = (b, label, tuple(t.shape), str(t.dtype).replace("torch.", ""))
        self.by_ptr[ptr] = key
        self.current += b
        weakref.finalize(st, self._free, key, ptr)

    def _free(self, key, ptr):
        b = self.live.pop(key, (0,))[0]
        self.current -= b
        if self.by_ptr.get(ptr) == key:
            del self.by_ptr[ptr]

    def note_peak(self, where):
        if self.current > self.peak:
            self.peak = self.current
            self.peak_at = where
            self.peak_live = sorted(self.live.values(), key=lambda v: -v[0])

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        label = str(func.overloadpacket.__name__)
        for t in torch.utils._pytree.tree_leaves(out):
            self.add(t, label)
        self.note_peak(label)
        return out

    @contextlib.contextmanager
    def untracked(self):
        self.suspended += 1
        try:
            yield
        finally:
            self.suspended -= 1


TRACKER = None  # the tracker the CUDA-kernel simulations suspend while they compute


def _untracked():
    return TRACKER.untracked() if TRACKER is not None else contextlib.nullcontext()


# ---- CUDA's kernels' memory behaviour on CPU tensors
_sdpa = F.scaled_dot_product_attention
_dropout = F.dropout


def cuda_dropout(x, p=0.5, training=True, inplace=False):
    if not training or p == 0:
        return x
    return torch.native_dropout(x, p, True)[0]


class EfficientAttention(torch.autograd.Function):
    """CUDA's memory-efficient attention as its allocations: out and logsumexp saved with q, k, v."""

    @staticmethod
    def forward(ctx, q, k, v, mask, p, causal, scale):
        with _untracked(), torch.enable_grad():
            qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
            with torch.no_grad():
                y = _math_sdpa(qq, kk, vv, mask, 0.0, causal, scale, False)
        out = y.clone()
        b, h, s = q.shape[0], q.shape[1], q.shape[2]
        lse = torch.empty(b, h, (s + 31) // 32 * 32)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mask, ctx.causal, ctx.scale = mask, causal, scale
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, out, lse = ctx.saved_tensors
        delta = torch.empty(q.shape[0], q.shape[1], q.shape[2])  # sum(dO * O) per row, fp32
        with _untracked(), torch.enable_grad():
            qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
            y = _math_sdpa(qq, kk, vv, ctx.mask, 0.0, ctx.causal, ctx.scale, False)
            gq, gk, gv = torch.autograd.grad(y, (qq, kk, vv), g)
        del delta
        return gq.clone(), gk.clone(), gv.clone(), None, None, None, None


class FusedRMSNorm(torch.autograd.Function):
    """CUDA's _fused_rms_norm (F.rms_norm on CUDA): y and an fp32 rstd of one per row, input and rstd saved."""

    @staticmethod
    def forward(ctx, x, shape, w, eps):
        with _untracked(), torch.no_grad():
            y = _rms_norm(x, shape, w, eps)
        y = y.clone()
        rstd = torch.empty(*x.shape[:x.dim() - len(shape)], *([1] * len(shape)))
        ctx.save_for_backward(x, w, rstd)
        ctx.shape, ctx.eps = shape, eps
        return y

    @staticmethod
    def backward(ctx, g):
        x, w, rstd = ctx.saved_tensors
        with _untracked(), torch.enable_grad():
            xx = x.detach().requires_grad_()
            ww = w.detach().requires_grad_() if w is not None else None
            y = _rms_norm(xx, ctx.shape, ww, ctx.eps)
            grads = torch.autograd.grad(y, [t for t in (xx, ww) if t is not None], g)
        gx = grads[0].clone()
        gw = grads[1].clone() if w is not None else None
        return gx, None, gw, None


_rms_norm = F.rms_norm


def cuda_rms_norm(x, normalized_shape, weight=None, eps=None):
    return FusedRMSNorm.apply(x, tuple(normalized_shape), weight, eps)


def _math_sdpa(q, k, v, mask, p, causal, scale, gqa):
    """aten _scaled_dot_product_attention_math (attention.cpp), op for op, with CUDA's dropout."""
    sf = math.sqrt(scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    q = q * sf
    if causal:
        L, S = q.shape[-2], k.shape[-2]
        m = torch.ones(L, S, dtype=torch.bool).tril()
        mask = torch.zeros(L, S, dtype=q.dtype).masked_fill_(m.logical_not(), float("-inf"))
    elif mask is not None and mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype).masked_fill_(mask.logical_not(), float("-inf"))
    if gqa and q.shape[-3] != k.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(rep, -3)
        v = v.repeat_interleave(rep, -3)
    attn = torch.matmul(q, k.transpose(-2, -1) * sf)
    if mask is not None:
        attn.add_(mask)
    attn = torch.softmax(attn, -1)
    if p > 0:
        attn = torch.native_dropout(attn, p, True)[0]
    return torch.matmul(attn, v)


def cuda_backend(q, k, v, mask, p, enable_gqa):
    """The backend CUDA's select_sdp_backend picks on sm80+ (flash, efficient, math): flash and cuDNN need
    16-bit inputs; the efficient kernel takes fp32 and masks but not grouped-query heads."""
    half = q.dtype in (torch.float16, torch.bfloat16)
    if half and mask is None and q.shape[-1] <= 256:
        return "flash"
    if q.shape[-3] != k.shape[-3]:
        return "math"
    if q.shape[-1] % (8 if half else 4) or v.shape[-1] % (8 if half else 4):
        return "math"
    return "efficient"


BACKENDS = []


def cuda_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    backend = cuda_backend(q, k, v, attn_mask, dropout_p, enable_gqa)
    BACKENDS.append(backend)
    if backend == "math":
        return _math_sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    return EfficientAttention.apply(q, k, v, attn_mask, dropout_p, is_causal, scale)


@contextlib.contextmanager
def cuda_kernels():
    F.scaled_dot_product_attention = cuda_sdpa
    torch.nn.functional.scaled_dot_product_attention = cuda_sdpa
    F.dropout = cuda_dropout
    F.rms_norm = cuda_rms_norm
    try:
        yield
    finally:
        F.scaled_dot_product_attention = _sdpa
        F.dropout = _dropout
        F.rms_norm = _rms_norm


def simulate(model, x, warmup=1):
    """max allocated bytes over one step (after `warmup` steps) and the tracker, as export_graph_models.py's
    pytorch_peak (SGD without momentum, cross-entropy, zero_grad(set_to_none=True))."""
    global TRACKER
    model = model.train()
    with torch.no_grad(), cuda_kernels():
        shape = tuple(model(x).shape)
    g = torch.Generator().manual_seed(1)
    labels = torch.randint(0, shape[-1], shape[:-1] if len(shape) == 3 else shape[:1], generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def loss_of(out):
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), labels.reshape(-1)) if out.dim() == 3 else \
            F.cross_entropy(out, labels)

    def step():
        loss = loss_of(model(x))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss)

    with cuda_kernels():
        for _ in range(warmup):
            step()
        tr = StorageTracker()
        for t in list(model.parameters()) + list(model.buffers()) + [x, labels]:
            tr.add(t, "resident")
        tr.note_peak("start")
        TRACKER = tr
        del BACKENDS[:]
        try:
            with tr:
                step()
        finally:
            TRACKER = None
    return tr


def memplan_prediction(memplan, name, model, x, extra, tmp):
    import memplan_torch

    path = os.path.join(tmp, f"{name}.json")
    memplan_torch.export_graph(model, (x,), path, train=True)
    cmd = [memplan, "plan", path, "--train", "--optimizer", "sgd", *extra, "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr[-1500:]}")
    d = json.loads(r.stdout)
    return d["pytorch_peak_bytes"], d.get("pytorch_workspace_bytes", 0)


def main():
    from export_graph_models import MODELS, build

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--memplan", default="")
    ap.add_argument("--out", default="")
    ap.add_argument("--top", type=int, default=0, help="print the N largest storages alive at the peak")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--image-batch", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    mib = lambda b: b / 2**20
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in [n for n in args.only.split(",") if n] or MODELS:
            model, x, extra, _ = build(name, args)
            row = {"model": name}
            if args.memplan:
                pred, ws = memplan_prediction(args.memplan, name, model, x, extra, tmp)
                row.update(memplan_prediction_bytes=pred, workspace_bytes=ws)
            tr = simulate(model, x)
            row.update(simulated_bytes=tr.peak, peak_op=tr.peak_at, attention_backends=sorted(set(BACKENDS)))
            if args.memplan:
                row["prediction_minus_workspace_over_simulated"] = round((pred - ws) / tr.peak, 4)
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.top:
                for b, label, shape, dt in tr.peak_live[:args.top]:
                    print(f"  {mib(b):9.2f} MiB  {label:32s} {dt:8s} {list(shape)}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
