"""The ONNX route on the zoo: each model exported with the TorchScript exporter in training mode (nothing folded,
the README's recipe), planned by `memplan plan --train` for both cases, and its `pytorch_peak_bytes` (memplan's
model of PyTorch eager) written beside estimate_step's figures for zoo_report.py to hold against the GPU's.

    python3 bench/zoo_onnx.py --out onnx.jsonl [--ids FILE] [--jobs 1] [--resume] [--timeout 1200]

Case flags: fp32 -> `--loss ce --optimizer none`; bf16_adamw -> `--loss ce --optimizer adamw --precision bf16`.
No --budget: the plan is memplan's keep-all plan (strategy none), its `peak_bytes` the planned peak (persistent +
inputs + activation arena).

The export is of what the measured step runs (bench/zoo_truth.py: `loss_fn(model(x), y)` in eager):
- the module is wrapped to return the logits tensor the zoo's loss reads (a Hugging Face model's ModelOutput
  would export every field it holds);
- transformers' mask code takes other branches when it sees a tracer (`is_tracing`): it materializes the causal
  mask and the packed-sequence check (`torch.diff`, which the TorchScript exporter cannot export) instead of
  letting SDPA run `is_causal` with no mask as eager does on these inputs. During the export those checks answer
  as in eager (masking_utils.is_tracing -> False, find_packed_sequence_indices -> None: one sequence per row, as
  the zoo's inputs are), so the graph holds the attention eager runs.
Per row: `exported` (or `export_error`, its class and first line), `plan_exit` and `plan_error` (memplan's exit
code and first error line), `pytorch_peak_bytes`, `memplan_peak_bytes` (the keep-all plan's peak),
`plan_seconds`, `export_seconds`.
"""
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

MEMPLAN = os.environ.get("MEMPLAN_BIN", os.path.join(os.path.dirname(HERE), "build", "memplan"))
CASE_FLAGS = {"fp32": ["--optimizer", "none"], "bf16_adamw": ["--optimizer", "adamw", "--precision", "bf16"]}
PLAN_TIMEOUT = int(os.environ.get("MEMPLAN_ZOO_PLAN_TIMEOUT", "480"))


@contextlib.contextmanager
def eager_masks():
    """transformers' mask helpers, grouped matmul and timm's same padding as eager runs them at the example's sizes,
    while the tracer runs (see the module's doc)."""
    try:
        from transformers import masking_utils as mu
    except Exception:  # noqa: BLE001 - no transformers: nothing to patch
        yield
        return
    patches = [(mu, "is_tracing", lambda *a, **k: False), (mu, "find_packed_sequence_indices", lambda *a, **k: None)]
    try:
        from transformers.integrations import moe
        patches.append((moe, "_grouped_mm", grouped_mm_per_expert))
    except Exception:  # noqa: BLE001 - an older transformers without the experts interface
        pass
    try:
        from timm.layers import padding as timm_padding
        same = timm_padding.get_same_padding
        patches.append((timm_padding, "get_same_padding",
                        lambda x, *a, **k: same(int(x), *a, **k)))  # the size at the example: a constant, as in eager
    except Exception:  # noqa: BLE001 - no timm
        pass
    saved = [(m, k, getattr(m, k)) for m, k, _ in patches if hasattr(m, k)]
    for m, k, v in patches:
        if hasattr(m, k):
            setattr(m, k, v)
    try:
        yield
    finally:
        for m, k, v in saved:
            setattr(m, k, v)


def grouped_mm_per_expert(input, weight, offs):
    """torch._grouped_mm (no ONNX symbolic) as the matmul of each expert's rows, concatenated: the example's
    routing, read by the tracer, fixes the row counts (planned at the example's sizes)."""
    import torch

    x, outs, start = input.to(weight.dtype), [], 0
    for i, end in enumerate(int(v) for v in offs.tolist()):
        if end > start:
            outs.append(torch.mm(x[start:end], weight[i]))
        start = end
    if start < x.shape[0]:  # rows routed to no expert (ids past the last) stay zero, as grouped_mm leaves them
        outs.append(x.new_zeros(x.shape[0] - start, weight.shape[2]))
    return torch.cat(outs, 0)


def logits_module(model):
    """The model returning the tensor the zoo's loss (zoo._logits_ce) reads."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *xs):
            out = self.inner(*xs)
            return out if isinstance(out, torch.Tensor) else (out.logits if hasattr(out, "logits") else out[0])

    return Logits(model)


_REGISTERED = []


def register_symbolics():
    """ONNX symbolics (opset 17) for ATen ops the TorchScript exporter lacks and the zoo's models call, each
    written as the ops it computes: expm1 (xIELU activations) as Exp(x) - 1; rms_norm (F.rms_norm) as
    x * 1/sqrt(mean(x^2) + eps) * weight; histc (mixture-of-experts routers
    counting tokens per expert) as a one-hot count of each value's bin, values outside [min, max] not counted."""
    if _REGISTERED:
        return
    from torch.onnx import register_custom_op_symbolic
    from torch.onnx import symbolic_helper as sh

    def expm1(g, x):
        one = g.op("CastLike", g.op("Constant", value_t=__import__("torch").tensor(1.0)), x)
        return g.op("Sub", g.op("Exp", x), one)

    @sh.parse_args("v", "i", "f", "f")
    def histc(g, x, bins, lo, hi):
        import torch

        xf = g.op("Cast", g.op("Reshape", x, g.op("Constant", value_t=torch.tensor([-1]))), to_i=1)
        if hi == lo:  # torch takes the data's min and max then: not known at export; the zoo's routers give both
            raise RuntimeError("histc with min == max takes the data's range: not exportable")
        c = lambda v: g.op("Constant", value_t=torch.tensor(v, dtype=torch.float32))  # noqa: E731
        idx = g.op("Floor", g.op("Mul", g.op("Sub", xf, c(lo)), c(bins / (hi - lo))))
        idx = g.op("Min", idx, c(float(bins - 1)))
        inside = g.op("Cast", g.op("And", g.op("GreaterOrEqual", xf, c(lo)), g.op("LessOrEqual", xf, c(hi))), to_i=1)
        # one-hot by comparison with the bin numbers (Equal against a Range; memplan has no OneHot)
        bins_t = g.op("Constant", value_t=torch.arange(bins, dtype=torch.float32))
        onehot = g.op("Cast", g.op("Equal", g.op("Unsqueeze", g.op("Max", idx, c(0.0)),
                                                 g.op("Constant", value_t=torch.tensor([1]))), bins_t), to_i=1)
        counts = g.op("ReduceSum", g.op("Mul", onehot, g.op("Unsqueeze", inside, g.op("Constant", value_t=torch.tensor([1])))),
                      g.op("Constant", value_t=torch.tensor([0])), keepdims_i=0)
        return g.op("CastLike", counts, x)

    def rms_norm(g, x, shape, weight, eps):
        import torch

        axes = list(range(-len(sh._get_const(shape, "is", "normalized_shape")), 0))
        e = torch.finfo(torch.float32).eps if sh._is_none(eps) else sh._get_const(eps, "f", "eps")
        c = lambda v: g.op("CastLike", g.op("Constant", value_t=torch.tensor(v, dtype=torch.float32)), x)  # noqa: E731
        # as transformers' RMSNorm modules write it: x * rsqrt(mean(x^2) + eps) * weight
        ms = g.op("ReduceMean", g.op("Pow", x, c(2.0)), axes_i=axes, keepdims_i=1)
        y = g.op("Mul", x, g.op("Reciprocal", g.op("Sqrt", g.op("Add", ms, c(e)))))
        return y if sh._is_none(weight) else g.op("Mul", y, weight)

    def repeat_interleave(g, x, repeats, dim=None, output_size=None):
        import torch
        from torch.onnx._internal.torchscript_exporter import symbolic_opset13

        sizes = sh._get_tensor_sizes(x)
        r = sh._maybe_get_const(repeats, "i")
        if isinstance(r, int) and not sh._is_none(dim) and sizes and None not in sizes:
            d = sh._get_const(dim, "i", "dim") % len(sizes)
            # a constant count along a dim of known shape: Unsqueeze after it, Expand, Reshape
            u = g.op("Unsqueeze", x, g.op("Constant", value_t=torch.tensor([d + 1])))
            e = g.op("Expand", u, g.op("Constant", value_t=torch.tensor(sizes[:d + 1] + [r] + sizes[d + 1:])))
            return g.op("Reshape", e, g.op("Constant", value_t=torch.tensor(sizes[:d] + [sizes[d] * r] + sizes[d + 1:])))
        return symbolic_opset13.repeat_interleave(g, x, repeats, dim, output_size)

    def sdpa(g, q, k, v, mask=None, dropout_p=None, is_causal=None, scale=None, enable_gqa=None):
        import torch
        from torch.onnx._internal.torchscript_exporter import symbolic_opset14

        args = [a if a is not None else g.op("prim::Constant") for a in (mask, dropout_p, is_causal, scale)]
        if enable_gqa is not None and not sh._is_none(enable_gqa) and sh._maybe_get_const(enable_gqa, "b"):
            qs, ks = sh._get_tensor_sizes(q) or [], sh._get_tensor_sizes(k) or []
            if len(qs) < 3 or len(ks) < 3 or qs[-3] is None or ks[-3] is None:
                raise RuntimeError("enable_gqa needs the query's and key's head counts")
            if qs[-3] != ks[-3]:
                groups, rank = qs[-3] // ks[-3], len(ks)
                i64 = lambda xs: g.op("Constant", value_t=torch.tensor(xs, dtype=torch.int64))  # noqa: E731

                def rep(t):  # [.., H, S, D] -> [.., H, groups, S, D] -> [.., H * groups, S, D]: repeat_interleave
                    u = g.op("Unsqueeze", t, i64([rank - 2]))
                    e = g.op("Expand", u, i64([1] * (rank - 2) + [groups, 1, 1]))
                    shape = g.op("Shape", t)
                    target = g.op("Concat", g.op("Slice", shape, i64([0]), i64([rank - 3])), i64([-1]),
                                  g.op("Slice", shape, i64([rank - 2]), i64([rank])), axis_i=0)
                    return g.op("Reshape", e, target)

                k, v = rep(k), rep(v)
        no = g.op("Constant", value_t=torch.tensor(False))
        return symbolic_opset14.scaled_dot_product_attention(g, q, k, v, *args, no)

    register_custom_op_symbolic("aten::scaled_dot_product_attention", sdpa, 17)
    register_custom_op_symbolic("aten::repeat_interleave", repeat_interleave, 17)
    def exponential(g, x, lambd=None, generator=None):
        import torch

        lam = 1.0 if lambd is None or sh._is_none(lambd) else sh._get_const(lambd, "f", "lambd")
        u = g.op("RandomUniformLike", x)  # -log(1 - U) / lambda, U uniform in [0, 1)
        one = g.op("CastLike", g.op("Constant", value_t=torch.tensor(1.0)), x)
        return g.op("Div", g.op("Neg", g.op("Log", g.op("Sub", one, u))),
                    g.op("CastLike", g.op("Constant", value_t=torch.tensor(lam)), x))

    def uniform(g, x, lo=None, hi=None, generator=None):
        low = 0.0 if lo is None or sh._is_none(lo) else sh._get_const(lo, "f", "from")
        high = 1.0 if hi is None or sh._is_none(hi) else sh._get_const(hi, "f", "to")
        return g.op("RandomUniformLike", x, low_f=low, high_f=high)

    register_custom_op_symbolic("aten::exponential", exponential, 17)
    register_custom_op_symbolic("aten::uniform", uniform, 17)
    register_custom_op_symbolic("aten::expm1", expm1, 17)
    register_custom_op_symbolic("aten::rms_norm", rms_norm, 17)
    register_custom_op_symbolic("aten::histc", histc, 17)
    _REGISTERED.append(True)


def export(model, inputs, path):
    import warnings

    import torch

    register_symbolics()
    model.train()
    with eager_masks(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(logits_module(model), tuple(inputs), path, dynamo=False,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, opset_version=17,
                          input_names=["input"], output_names=["logits"])


def first_line(text):
    return str(text).strip().splitlines()[0][:300] if str(text).strip() else ""


def plan_error(stderr):
    """memplan's first error line (the line naming the error, else the first line)."""
    lines = [ln.strip() for ln in (stderr or "").splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower():
            return ln[:300]
    return lines[0][:300] if lines else ""


def plan(path, case):
    t = time.time()
    try:
        p = subprocess.run([MEMPLAN, "plan", path, "--train", "--loss", "ce", "--json", *CASE_FLAGS[case]],
                           capture_output=True, text=True, timeout=PLAN_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"ok": False, "plan_exit": None, "plan_error": f"plan timeout {PLAN_TIMEOUT}s",
                "plan_seconds": round(time.time() - t, 2)}
    r = {"plan_exit": p.returncode, "plan_seconds": round(time.time() - t, 2)}
    if p.returncode != 0:
        r.update(ok=False, plan_error=plan_error(p.stderr))
        return r
    j = json.loads(p.stdout)
    r.update(ok=True, pytorch_peak_bytes=j.get("pytorch_peak_bytes"), memplan_peak_bytes=j["peak_bytes"],
             doubts=j.get("pytorch_peak_doubts", []),
             # the zoo_report fields: only the peak is predicted on this route
             peak_allocated_bytes=j.get("pytorch_peak_bytes"),
             before_step_bytes=j.get("persistent_bytes", 0) + j.get("input_bytes", 0),
             peak_reserved_bytes=j.get("pytorch_peak_bytes"))
    warn = [ln.strip() for ln in p.stderr.splitlines() if "warning" in ln.lower()]
    if warn:
        r["plan_warnings"] = [w[:200] for w in warn[:3]]
    return r


def memplan_build():
    """The binary planned with: its path and modification time (a shared build tree may be rebuilt mid-run)."""
    try:
        return f"{MEMPLAN} {time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(os.path.getmtime(MEMPLAN)))}Z"
    except OSError:
        return MEMPLAN


def export_entry(entry, path, adapt=lambda inputs: inputs):
    """The entry built (seed 0) and exported to path with adapt(inputs): (the error's class and first line, or
    None; the seconds it took)."""
    import torch

    import zoo

    t0 = time.time()
    try:
        torch.manual_seed(0)
        model, inputs, _, _ = zoo.build(entry)
        export(model, adapt(inputs), path)
        error = None
    except Exception as e:  # noqa: BLE001 - recorded per entry
        error = f"{type(e).__name__}: {first_line(e)}"
    return error, round(time.time() - t0, 2)


def run_one(entry, cases):
    import torch

    rows = []
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        export_error, export_seconds = export_entry(entry, path)
        onnx_bytes = os.path.getsize(path) if export_error is None and os.path.exists(path) else None
        for case in cases:
            r = {"id": entry["id"], "case": case, "route": "onnx", "torch": torch.__version__,
                 "exported": export_error is None, "export_seconds": export_seconds, "memplan": memplan_build()}
            if export_error:
                r.update(ok=False, export_error=export_error, error="export: " + export_error)
            else:
                r["onnx_bytes"] = onnx_bytes
                r.update(plan(path, case))
                if not r["ok"]:
                    r["error"] = f"plan exit {r['plan_exit']}: {r['plan_error']}"
            rows.append(r)
    return rows


if __name__ == "__main__":
    import zoo

    zoo.main(__file__, run_one, __doc__)
