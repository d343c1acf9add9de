# Hostile input, round 3 (issue 35): memplan-domain ops in JSON graphs checked against their schema, Softmax, LogSoftmax
# and Hardmax before opset 13 computed as ONNX Runtime computes them, allocation traces, JSON tensors and device
# profiles with numbers out of range. Every case ends with its documented exit code (docs/errors.md) and a message
# naming the problem; never a crash, an internal error (70) or silent acceptance.
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
except ImportError:
    print("skip: numpy, onnx or onnxruntime is not installed")
    sys.exit(77)

OK, MALFORMED, UNSUPPORTED, INVALID = 0, 4, 5, 6
CRASH_CODES = {70, 134, 139, -6, -11}


class Runner:
    def __init__(self, memplan, tmp):
        self.memplan, self.tmp, self.failures, self.count = memplan, tmp, 0, 0

    def run(self, args, timeout=120):
        r = subprocess.run([self.memplan, *args], capture_output=True, text=True, timeout=timeout)
        return r.returncode, r.stderr

    def check(self, name, rc, err, expected, words):
        self.count += 1
        missing = [w for w in words if w not in err]
        ok = rc == expected and not missing and rc not in CRASH_CODES
        if not ok:
            self.failures += 1
        print(f"{'ok  ' if ok else 'FAIL'} {name}: exit {rc} (expected {expected})" +
              (f", message lacks {missing}" if missing else "") + ("" if ok else f"\n     {err.strip()[:300]}"))

    def file(self, name, doc):
        p = os.path.join(self.tmp, name)
        with open(p, "w") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        return p


# ---- A: memplan-domain ops against their schema -------------------------------------------------------------------

def t(name, shape, dtype="float32", role="activation"):
    d = {"name": name, "dtype": dtype, "role": role}
    if shape is not None:
        d["shape"] = shape
    return d


def graph(tensors, op, inputs):
    op = dict(op, domain="memplan")
    return {"format": "memplan.graph", "version": 1, "name": "h3", "inputs": inputs, "outputs": [o for o in op["outputs"] if o],
            "tensors": tensors, "ops": [op]}


def rms(y_shape=(4, 64), y_dtype="float32", inputs=("x",), attrs=None):
    return graph([t("x", [4, 64], role="input"), t("s", [64], role="weight"), t("y", list(y_shape) if y_shape else None, y_dtype)],
                 {"name": "norm", "type": "RMSNormalization", "inputs": list(inputs), "outputs": ["y"], "attrs": attrs or {}}, ["x"])


def attention(q=(1, 4, 8, 16), k=(1, 2, 8, 16), v=(1, 2, 8, 16), o=(1, 4, 8, 16), attrs=None, inputs=("q", "k", "v")):
    return graph([t("q", list(q), role="input"), t("k", list(k), role="input"), t("v", list(v), role="input"), t("o", list(o))],
                 {"name": "attn", "type": "FusedAttention", "inputs": list(inputs), "outputs": ["o"], "attrs": attrs or {}},
                 ["q", "k", "v"])


def fused(expr, y=(4, 8), y_dtype="float32"):
    return graph([t("x", [4, 8], role="input"), t("y", list(y), y_dtype)],
                 {"name": "chain", "type": "FusedElementwise", "inputs": ["x"], "outputs": ["y"], "attrs": {"expr": expr}}, ["x"])


def single(op_type, y=(4, 64), attrs=None):
    return graph([t("x", [4, 64], role="input"), t("y", list(y))],
                 {"name": "one", "type": op_type, "inputs": ["x"], "outputs": ["y"], "attrs": attrs or {}}, ["x"])


def schema_cases(r):
    cases = [
        ("RMSNormalization as declared", rms(), OK, []),
        ("RMSNormalization with its scale and no declared output shape", rms(None, inputs=("x", "s")), OK, []),
        ("RMSNormalization declared smaller than its input", rms((4, 8)), INVALID, ["'norm'", "declared float32 [4,8]", "[4,64]"]),
        ("RMSNormalization with no input", rms(inputs=()), INVALID, ["'norm'", "required input 0"]),
        ("RMSNormalization output declared int64", rms(y_dtype="int64"), INVALID, ["'norm'", "int64", "float32"]),
        ("RMSNormalization axis out of range", rms(attrs={"axis": 5}), INVALID, ["'norm'", "'axis'"]),
        ("RMSNormalization negative epsilon", rms(attrs={"epsilon": -0.5}), INVALID, ["'norm'", "'epsilon'"]),
        ("RMSNormalization scale of the wrong size", rms(inputs=("x", "x")), INVALID, ["'norm'", "scale"]),
        ("RMSNormalization with three inputs", rms(inputs=("x", "s", "s")), INVALID, ["'norm'", "at most 2"]),
        ("FusedAttention as declared (grouped heads)", attention(), OK, []),
        ("FusedAttention with one input", attention(inputs=("q",)), INVALID, ["'attn'", "required input 1"]),
        ("FusedAttention with rank-3 operands", attention((4, 8, 16), (4, 8, 16), (4, 8, 16), (4, 8, 16)), INVALID, ["'attn'", "rank 3"]),
        ("FusedAttention heads that do not divide", attention(q=(1, 3, 8, 16), o=(1, 3, 8, 16)), INVALID, ["'attn'", "multiple"]),
        ("FusedAttention unknown layout", attention(attrs={"q_layout": "sbhd"}), INVALID, ["'attn'", "sbhd"]),
        ("FusedAttention dropout 1", attention(attrs={"dropout_ratio": 1.0}), INVALID, ["'attn'", "dropout_ratio"]),
        ("FusedAttention causal 5", attention(attrs={"causal": 5}), INVALID, ["'attn'", "'causal'"]),
        ("FusedAttention output of the wrong head dim", attention(o=(1, 4, 8, 8)), INVALID, ["'attn'", "declared"]),
        ("FusedElementwise as declared", fused("in 0;const 2;mul 0 1;relu 2"), OK, []),
        ("FusedElementwise reading operand -1", fused("in -1;relu 0"), INVALID, ["'chain'", "in -1"]),
        ("FusedElementwise reading operand 7 of 1", fused("in 7;relu 0"), INVALID, ["'chain'", "operand 7"]),
        ("FusedElementwise binary op with one argument", fused("in 0;add 0"), INVALID, ["'chain'", "node 1"]),
        ("FusedElementwise node reading a later node", fused("in 0;relu 2;neg 0"), INVALID, ["'chain'", "later node"]),
        ("FusedElementwise unknown op code", fused("in 0;frobnicate 0"), INVALID, ["'chain'", "frobnicate"]),
        ("FusedElementwise trailing fields", fused("in 0;relu 0 0"), INVALID, ["'chain'"]),
        ("FusedElementwise output broadcast wrong", fused("in 0;relu 0", y=(4, 9)), INVALID, ["'chain'", "[4,9]"]),
        ("FusedElementwise output declared int64", fused("in 0;relu 0", y_dtype="int64"), INVALID, ["'chain'", "int64"]),
        ("AllReduce keeping its shape", single("AllReduce", attrs={"ranks": 2}), OK, []),
        ("AllReduce that changes shape", single("AllReduce", y=(4, 32)), INVALID, ["'one'", "[4,32]"]),
        ("AllReduce with 0 ranks", single("AllReduce", attrs={"ranks": 0}), INVALID, ["'one'", "'ranks'"]),
        ("unknown op of the memplan domain", single("Frobnicate"), UNSUPPORTED, ["'one'", "Frobnicate"]),
    ]
    x = os.path.join(r.tmp, "x.npy")
    for name, doc, expected, words in cases:
        p = r.file("schema.json", doc)
        for cmd in (["analyze", p], ["graph", p, "-o", os.path.join(r.tmp, "g.dot")]):
            rc, err = r.run(cmd)
            r.check(f"{cmd[0]}: {name}", rc, err, expected, words)
    # `run` (which wrote past the arena or segfaulted before): the same refusals before any kernel runs.
    np.save(x, np.ones((4, 64), np.float32))
    for name, doc, words in [("RMSNormalization declared smaller than its input", rms((4, 8)), ["'norm'"]),
                             ("RMSNormalization with no input", rms(inputs=()), ["'norm'"])]:
        rc, err = r.run(["run", r.file("schema.json", doc), "--input", x, "--output", os.path.join(r.tmp, "y.npy")])
        r.check(f"run: {name}", rc, err, INVALID, words)
    np.save(x, np.ones((4, 8), np.float32))
    rc, err = r.run(["run", r.file("schema.json", fused("in -1;relu 0")), "--input", x, "--output", os.path.join(r.tmp, "y.npy")])
    r.check("run: FusedElementwise reading operand -1", rc, err, INVALID, ["'chain'"])


# ---- B: Softmax, LogSoftmax, Hardmax before opset 13 -------------------------------------------------------------

def normalizer_model(op, opset, axis, shape, path, before=False):
    # x -> [Mul by a weight] -> op(axis) -> y; the weight makes a training step's gradient reach the op.
    nodes, inits, src = [], [], "x"
    if before:
        w = np.linspace(0.5, 1.5, int(np.prod(shape[1:]))).astype(np.float32).reshape(shape[1:])
        inits.append(helper.make_tensor("w", TensorProto.FLOAT, list(w.shape), w.flatten().tolist()))
        nodes.append(helper.make_node("Mul", ["x", "w"], ["xw"], name="scale"))
        src = "xw"
    attrs = {} if axis is None else {"axis": axis}
    nodes.append(helper.make_node(op, [src], ["y"], name="norm", **attrs))
    g = helper.make_graph(nodes, "legacy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    onnx.save(m, path)


def opset_cases(r):
    rng = np.random.default_rng(35)
    model, x, y = (os.path.join(r.tmp, n) for n in ("legacy.onnx", "legacy_x.npy", "legacy_y.npy"))
    worst = 0.0
    for op in ("Softmax", "LogSoftmax", "Hardmax"):
        for opset in (11, 12, 13):
            for shape in ((3, 5), (2, 3, 4), (2, 3, 2, 5)):
                for axis in (0, 1, -1, None):
                    normalizer_model(op, opset, axis, shape, model, before=(op != "Hardmax"))
                    xv = (rng.standard_normal(shape) * 3).astype(np.float32)
                    np.save(x, xv)
                    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": xv})[0]
                    rc, err = r.run(["run", model, "--input", x, "--output", y])
                    name = f"{op} opset {opset} axis {axis} rank {len(shape)} vs ONNX Runtime"
                    if rc != 0:
                        r.check(name, rc, err, OK, [])
                        continue
                    diff = float(np.max(np.abs(np.load(y) - want)))
                    worst = max(worst, diff)
                    r.check(name + f" (max diff {diff:.2g})", 0 if diff <= 1e-5 else 1, err, OK, [])
    print(f"     largest |memplan - onnxruntime| over the legacy normalizers: {worst:.3g}")


def loss_model(w, op, opset, axis):
    # loss = sum(op(C @ W, axis) * R) with C and R constants: `train --loss none` takes the output as the loss and
    # needs no synthetic input, so ONNX Runtime can compute the same loss for finite differences.
    c = np.sin(np.arange(30)).astype(np.float32).reshape(2, 3, 5)
    rv = np.cos(np.arange(24)).astype(np.float32).reshape(2, 3, 4)

    def const(name, v):
        return helper.make_node("Constant", [], [name], name=name + "_const",
                                value=helper.make_tensor(name + "_value", TensorProto.FLOAT, list(v.shape), v.flatten().tolist()))
    nodes = [const("c", c), const("r", rv), helper.make_node("MatMul", ["c", "w"], ["h"], name="mm"),
             helper.make_node(op, ["h"], ["s"], name="norm", axis=axis), helper.make_node("Mul", ["s", "r"], ["p"], name="mul"),
             helper.make_node("ReduceSum", ["p"], ["loss"], name="sum", keepdims=0)]
    g = helper.make_graph(nodes, "grad", [], [helper.make_tensor_value_info("loss", TensorProto.FLOAT, None)],
                          [helper.make_tensor("w", TensorProto.FLOAT, list(w.shape), w.flatten().tolist())])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    return m


def gradient_cases(r):
    # A training step through Softmax / LogSoftmax over a non-last axis: memplan's weight gradient against central
    # finite differences of the loss computed by ONNX Runtime.
    model, grads = os.path.join(r.tmp, "grad.onnx"), os.path.join(r.tmp, "grads")
    w = np.linspace(-1.0, 1.5, 20).reshape(5, 4)
    for op in ("Softmax", "LogSoftmax"):
        for opset, axis in ((11, 1), (12, 0), (13, 1)):
            name = f"train: dW through opset-{opset} {op}(axis {axis}) vs finite differences"
            onnx.save(loss_model(w.astype(np.float32), op, opset, axis), model)
            shutil.rmtree(grads, ignore_errors=True)
            rc, err = r.run(["train", model, "--loss", "none", "--steps", "1", "--lr", "0", "--save-grads", grads])
            if rc != 0:
                r.check(name, rc, err, OK, [])
                continue
            got = [g for g in (np.load(os.path.join(grads, f)) for f in sorted(os.listdir(grads))) if g.shape == w.shape]

            def loss(wv):
                m = loss_model(wv.astype(np.float32), op, opset, axis)
                return float(ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0])
            fd = np.zeros_like(w)
            for i in np.ndindex(w.shape):
                hi, lo = w.copy(), w.copy()
                hi[i] += 1e-2
                lo[i] -= 1e-2
                fd[i] = (loss(hi) - loss(lo)) / 2e-2
            diff = float(np.max(np.abs(got[0] - fd))) if len(got) == 1 else float("inf")
            r.check(f"{name} (max diff {diff:.2g} of {float(np.max(np.abs(fd))):.2g})", 0 if diff <= 1e-3 else 1, err, OK, [])


# ---- C: allocation traces, JSON tensors, device profiles ----------------------------------------------------------

def trace_doc(**over):
    d = {"format": "memplan-allocation-trace", "version": 1, "device": 0, "alignment": 512, "primary_stream": 0, "planned": False,
         "caching_allocator_reserved_bytes": 2048, "caching_allocator_max_allocated_bytes": 1024,
         "blocks": [{"size": 1000, "bytes": 1024, "stream": 0, "alloc_event": 0, "free_event": 1}],
         "events": [{"kind": "alloc", "block": 0, "bytes": 1024}, {"kind": "free", "block": 0, "bytes": 1024}]}
    d.update(over)
    return d


def block(**over):
    b = {"size": 1000, "bytes": 1024, "stream": 0, "alloc_event": 0, "free_event": 1}
    b.update(over)
    return [b]


def event0(**over):
    e = {"kind": "alloc", "block": 0, "bytes": 1024}
    e.update(over)
    return [e, {"kind": "free", "block": 0, "bytes": 1024}]


def trace_cases(r):
    svg = os.path.join(r.tmp, "trace.svg")
    cases = [
        ("a valid trace", trace_doc(), OK, []),
        ("fractional version", trace_doc(version=1.5), MALFORMED, ["'version'", "1.5"]),
        ("fractional size", trace_doc(blocks=block(size=1000.5)), MALFORMED, ["block 0's 'size'", "1000.5"]),
        ("negative size", trace_doc(blocks=block(size=-1000)), MALFORMED, ["block 0's 'size'", "-1000"]),
        ("size past 2^63", trace_doc(blocks=block(size=2 ** 64 - 1, bytes=0)), MALFORMED, ["block 0", "size"]),
        ("fractional bytes of an event", trace_doc(events=event0(bytes=1024.5)), MALFORMED, ["event 0's 'bytes'"]),
        ("fractional event number", trace_doc(blocks=block(alloc_event=0.5)), MALFORMED, ["block 0's 'alloc_event'", "0.5"]),
        ("negative event number", trace_doc(blocks=block(free_event=-1)), MALFORMED, ["block 0's 'free_event'"]),
        ("fractional block of an event", trace_doc(events=event0(block=0.25)), MALFORMED, ["event 0's 'block'"]),
        ("device 10^9", trace_doc(device=10 ** 9), MALFORMED, ["'device'", "[0, 127]"]),
        ("device -3", trace_doc(device=-3), MALFORMED, ["'device'", "[0, 127]"]),
        ("fractional device", trace_doc(device=0.5), MALFORMED, ["'device'"]),
        ("fractional stream", trace_doc(primary_stream=0.5), MALFORMED, ["'primary_stream'"]),
    ]
    for name, doc, expected, words in cases:
        rc, err = r.run(["viz", "--trace", r.file("trace.json", doc), "-o", svg])
        r.check(f"viz --trace: {name}", rc, err, expected, words)


def relu_graph(**tensor_over):
    x = {"name": "x", "shape": [2, 4], "role": "input"}
    x.update(tensor_over)
    return {"format": "memplan.graph", "version": 1, "name": "j", "inputs": ["x"], "outputs": ["y"],
            "tensors": [x, {"name": "y"}], "ops": [{"name": "relu", "type": "Relu", "inputs": ["x"], "outputs": ["y"]}]}


def profile(**over):
    p = {"name": "p", "peak_flops": 51.5e12, "hbm_bytes_per_s": 2.9e12, "host_to_device_bytes_per_s": 53e9,
         "device_to_host_bytes_per_s": 47e9, "kernel_launch_seconds": 5e-6}
    p.update(over)
    return p


def tensor_and_profile_cases(r, samples):
    for name, over, expected, words in [("on_host true", {"on_host": True}, OK, []),
                                        ("on_host given as a string", {"on_host": "yes"}, MALFORMED, ["'x'", "on_host", "\"yes\""]),
                                        ("on_host given as 1", {"on_host": 1}, MALFORMED, ["'x'", "on_host"])]:
        rc, err = r.run(["analyze", r.file("onhost.json", relu_graph(**over))])
        r.check(f"JSON tensor: {name}", rc, err, expected, words)
    model = os.path.join(samples, "models", "tiny_mlp.onnx")
    cases = [("a sane profile", profile(), OK, [])]
    for field in ("peak_flops", "hbm_bytes_per_s", "host_to_device_bytes_per_s", "device_to_host_bytes_per_s",
                  "interconnect_bytes_per_s"):
        for value in (0, -1e12, 1e300, 1e-300):
            cases.append((f"{field} {value}", profile(**{field: value}), MALFORMED, [field, "outside"]))
    for value in (-1, 1e300, 5.0):
        cases.append((f"kernel_launch_seconds {value}", profile(kernel_launch_seconds=value), MALFORMED, ["kernel_launch_seconds", "outside"]))
    cases.append(("op_scale 1e300", profile(op_scale={"MatMul": 1e300}), MALFORMED, ["op_scale", "MatMul"]))
    cases.append(("op_scale 1e-300", profile(op_scale={"MatMul": 1e-300}), MALFORMED, ["op_scale", "MatMul"]))
    # JSON has no infinity: Python writes Infinity, which a strict reader refuses as invalid JSON.
    cases.append(("peak_flops Infinity", json.dumps(profile()).replace("51500000000000.0", "Infinity"), MALFORMED, []))
    for name, doc, expected, words in cases:
        p = r.file("profile.json", doc)
        rc, err = r.run(["plan", model, "--train", "--device-profile", p, "--json"])
        r.check(f"device profile: {name}", rc, err, expected, words)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        r = Runner(os.path.abspath(a.memplan), tmp)
        schema_cases(r)
        opset_cases(r)
        gradient_cases(r)
        trace_cases(r)
        tensor_and_profile_cases(r, os.path.abspath(a.samples))
    print(f"{r.count - r.failures} of {r.count} cases ok")
    return 1 if r.failures else 0


if __name__ == "__main__":
    sys.exit(main())
