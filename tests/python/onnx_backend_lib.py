# ONNX's own backend test cases (shipped in the `onnx` wheel) run through `memplan run`: discovery, scope, verdicts.
#
# Scope rule (a case is skipped, with its reason, when any holds):
#   - a graph input or output is not a tensor (sequence, map, optional types);
#   - a tensor of dtype string appears (graph inputs/outputs, initializers, Constant values);
#   - a node belongs to the training-preview domain (ai.onnx.preview.training) or the ONNX-ML domain;
#   - a node is a sequence op (Sequence*, SplitToSequence, ConcatFromSequence) or an Optional op;
#   - the model's weights are not shipped: a `real` case names a model by URL; the one the wheel ships for it
#     is the `light` model of the same name, which runs in the `light` suite (so it is not counted twice).
# Everything else is in scope. Verdicts: pass (exit 0, outputs match: shape, dtype, values within rtol 1e-3
# and atol 1e-4, NaN where NaN), refused (a documented exit code 2..12 with `memplan: error (...)`), wrong
# (exit 0 with a wrong output: always a failure), crash (a signal or exit 70: always a failure), timeout.
import json
import os
import signal
import subprocess
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

SUITES = ["simple", "pytorch-operator", "pytorch-converted", "light", "real"]
RTOL, ATOL = 1e-3, 1e-4
OUT_OF_SCOPE_DOMAINS = {"ai.onnx.preview.training": "the training-preview domain", "ai.onnx.ml": "the ONNX-ML domain"}
SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer")
SEQUENCE_OPS = {"SplitToSequence", "ConcatFromSequence", "Optional", "OptionalHasElement", "OptionalGetElement"}


def data_root():
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


class Case:
    def __init__(self, suite, name, model, data_sets, light=False):
        self.suite, self.name, self.model, self.data_sets, self.light = suite, name, model, data_sets, light

    @property
    def id(self):
        return f"{self.suite}/{self.name}"


def _light_input(vi):
    # What onnx's backend runner feeds a light model (runner.generate_dummy_data, random=False).
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def discover(suites=SUITES):
    """Yields (case, skip_reason or None) for every case of the given suites."""
    root = data_root()
    for suite in suites:
        folder = os.path.join(root, suite)
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if suite == "light":
                if not name.endswith(".onnx"):
                    continue
                prefix = path[: -len(".onnx")]
                yield Case(suite, name[: -len(".onnx")], path, [], light=True), None
                continue
            if suite == "real":
                meta = json.load(open(os.path.join(path, "data.json")))
                url = meta.get("url", "")
                local = os.path.basename(url) if url.startswith("onnx/backend/test/data/light/") else None
                reason = (f"weights not shipped: the wheel ships it as light/{local[:-5]} (run there)" if local
                          else f"weights not shipped (downloaded from {url})")
                yield Case(suite, name, None, []), reason
                continue
            model = os.path.join(path, "model.onnx")
            sets = []
            for ds in sorted(d for d in os.listdir(path) if d.startswith("test_data_set_")):
                dsp = os.path.join(path, ds)
                ins = sorted((f for f in os.listdir(dsp) if f.startswith("input_")), key=lambda f: int(f[6:-3]))
                outs = sorted((f for f in os.listdir(dsp) if f.startswith("output_")), key=lambda f: int(f[7:-3]))
                sets.append(([os.path.join(dsp, f) for f in ins], [os.path.join(dsp, f) for f in outs]))
            yield Case(suite, name, model, sets), None


def scope_reason(model):
    """Why a loaded ModelProto is out of scope, or None."""
    g = model.graph
    for vi in list(g.input) + list(g.output):
        t = vi.type
        if not t.HasField("tensor_type"):
            kind = t.WhichOneof("value") or "untyped"
            return f"'{vi.name}' is a {kind.replace('_type', '')}, not a tensor"
        if t.tensor_type.elem_type == onnx.TensorProto.STRING:
            return f"'{vi.name}' is a string tensor"
    for init in g.initializer:
        if init.data_type == onnx.TensorProto.STRING:
            return f"initializer '{init.name}' is a string tensor"
    for node in g.node:
        if node.domain in OUT_OF_SCOPE_DOMAINS:
            return f"{node.op_type} is in {OUT_OF_SCOPE_DOMAINS[node.domain]}"
        if node.op_type.startswith("Sequence") or node.op_type in SEQUENCE_OPS:
            return f"{node.op_type} is a sequence/optional op"
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == onnx.TensorProto.STRING:
                return f"{node.op_type} holds a string constant"
    return None


def _load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def compare(got, want):
    """None when `got` matches `want`, else why not."""
    if got.shape != want.shape:
        return f"shape {list(got.shape)}, expected {list(want.shape)}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if want.dtype == np.bool_ or np.issubdtype(want.dtype, np.integer):
        bad = int(np.count_nonzero(got != want))
        return f"{bad} of {want.size} values differ" if bad else None
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    ok = np.isclose(g64, w64, rtol=RTOL, atol=ATOL, equal_nan=True)
    if ok.all():
        return None
    k = int(np.argmax(~ok.ravel()))
    return (f"{int((~ok).sum())} of {want.size} values differ (max |diff| {float(np.nanmax(np.abs(g64 - w64))):.3g}; "
            f"first at {k}: {g64.ravel()[k]:.6g} vs {w64.ravel()[k]:.6g})")


def _first_line(text):
    for line in text.splitlines():
        if line.startswith("memplan: error"):
            return line[len("memplan: "):][:300]
    lines = [l for l in text.splitlines() if l.strip()]
    return (lines[-1] if lines else "")[:300]


def run_case(memplan, case, timeout=120, extra=()):
    """Returns (verdict, detail): verdict in pass | refused | wrong | crash | timeout | skip."""
    model = onnx.load(case.model)
    reason = scope_reason(model)
    if reason:
        return "skip", reason
    with tempfile.TemporaryDirectory() as tmp:
        if case.light:
            prefix = case.model[: -len(".onnx")]
            inits = {i.name for i in model.graph.initializer}
            feeds = [_light_input(vi) for vi in model.graph.input if vi.name not in inits]
            outs = []
            for k in range(len(model.graph.output)):
                p = f"{prefix}_output_{k}.pb"
                if not os.path.exists(p):
                    return "skip", f"no reference output {os.path.basename(p)} shipped"
                outs.append(p)
            data_sets = [(feeds, outs)]
        else:
            data_sets = [([_load_pb(p) for p in ins], outs) for ins, outs in case.data_sets]
        if not data_sets:
            return "skip", "no test data set shipped"
        for n, (inputs, outputs) in enumerate(data_sets):
            cmd = [memplan, "run", case.model, *extra]
            for k, x in enumerate(inputs):
                p = os.path.join(tmp, f"in{n}_{k}.npy")
                np.save(p, x)
                cmd += ["--input", p]
            wants = [_load_pb(p) for p in outputs]
            for k in range(len(wants)):
                cmd += ["--output", os.path.join(tmp, f"out{n}_{k}.npy")]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)
            except subprocess.TimeoutExpired:
                return "timeout", f"no result in {timeout} s"
            if any(m in r.stderr for m in SANITIZER_REPORTS):
                return "crash", f"sanitizer report (exit {r.returncode}): {_first_line(r.stderr)}"
            if r.returncode < 0:
                return "crash", f"killed by {signal.Signals(-r.returncode).name}: {r.stderr.strip()[-300:]}"
            if r.returncode == 70 or (r.returncode != 0 and "memplan: error" not in r.stderr):
                return "crash", f"exit {r.returncode}: {_first_line(r.stderr)}"
            if r.returncode != 0:
                return "refused", f"exit {r.returncode}: {_first_line(r.stderr)}"
            for k, want in enumerate(wants):
                why = compare(np.load(os.path.join(tmp, f"out{n}_{k}.npy")), want)
                if why:
                    name = model.graph.output[k].name
                    return "wrong", f"output '{name}' (data set {n}): {why}"
    return "pass", ""


def tally(results):
    """{suite: {verdict: count}} from [(case, verdict, detail)]."""
    out = {}
    for case, verdict, _ in results:
        out.setdefault(case.suite, {}).setdefault(verdict, 0)
        out[case.suite][verdict] += 1
    return out
