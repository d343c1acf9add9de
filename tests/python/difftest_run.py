"""Runs random graphs (difftest_lib) through `memplan run` and ONNX Runtime and compares outputs and shapes.

Many graphs share one memplan invocation: a batch is one model holding each graph under its own name prefix
(independent subgraphs). When the batch fails, each graph runs alone, so that a refusal or a crash is
attributed to one graph. Verdicts per graph: agree, disagree (values, dtypes or shapes differ), refused (memplan
exits with a documented error code and a message), crash (a signal, a timeout, exit 70 internal or 11
verification), or skipped (ONNX Runtime refuses the graph: the generator built an invalid one).
"""
import json
import os
import re
import subprocess
import tempfile

import numpy as np
import onnx
from onnx import helper

import difftest_lib as lib

REFUSAL_CODES = {2, 3, 4, 5, 6, 7, 8, 9, 10, 12}
# Through float16, ORT accumulates sums (MatMul, reductions) in float16, memplan in float32: an absolute 1e-2.
TOL = {"float32": (1e-4, 1e-5), "float64": (1e-4, 1e-5), "float16": (1e-2, 1e-2)}
TIMEOUT_S = 120
SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer")


def ort_session(model):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def ort_run(model, values):
    """{name: array} for every output of `model`, or the exception ORT raised."""
    try:
        sess = ort_session(model)
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(None, values)))
    except Exception as e:  # noqa: BLE001: any ORT refusal means the graph is invalid
        return e


def reason_of(stderr):
    """A refusal's message with names and numbers taken out: refusals of one kind count together."""
    line = next((ln for ln in stderr.splitlines() if "error" in ln), stderr.strip()[:200])
    line = re.sub(r"'[^']*'", "'…'", line)
    line = re.sub(r"\[[0-9, ]*\]", "[…]", line)
    line = re.sub(r"\b\d+\b", "N", line)
    line = re.sub(r"\(\w+\)", lambda m: m.group(0), line)
    return line.replace("memplan: ", "")[:160]


def memplan_cmd(memplan, args, timeout=TIMEOUT_S):
    try:
        r = subprocess.run([memplan, *args], capture_output=True, text=True, timeout=timeout,
                           errors="replace")
        if any(m in r.stderr for m in SANITIZER_REPORTS):
            return "sanitizer report", r.stdout, r.stderr
        return r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired:
        return "timeout", "", f"timed out after {timeout} s"


def is_crash(rc):
    return rc not in REFUSAL_CODES  # a signal, a timeout, a sanitizer report, exit 70 or 11


class Graph:
    """One generated graph with its ORT reference: outputs, every tensor's value and shape."""

    def __init__(self, seed, ops):
        self.seed = seed
        made = lib.make_graph(seed, ops)
        self.builder = self.model = None
        self.verdict, self.detail = None, ""
        if made is None:
            self.verdict = "empty"
            return
        self.builder, self.model, self.outputs = made
        self.reference(self.model)

    def reference(self, model):
        self.model = model
        self.outputs = [o.name for o in model.graph.output]
        produced = [o for nd in model.graph.node for o in nd.output if o]
        full = onnx.ModelProto()
        full.CopyFrom(model)
        del full.graph.output[:]
        full.graph.output.extend(self.builder.value_info(o) for o in produced)
        ref = ort_run(full, self.inputs_values())
        if isinstance(ref, Exception):
            self.verdict, self.detail = "skipped", str(ref).splitlines()[0][:200]
            return
        self.ref = ref
        self.verdict = None

    def inputs_values(self):
        return {i.name: self.builder.values[i.name] for i in self.model.graph.input}

    def ops(self):
        return [n.op_type for n in self.model.graph.node]


def compare(g, got, shapes):
    """Problems of memplan's outputs `got` ({name: array}) and inferred `shapes` ({name: [dims]}) against ORT."""
    problems = []
    for name in g.outputs:
        want, have = g.ref[name], got.get(name)
        if have is None:
            problems.append(f"{name}: no output")
            continue
        want = np.asarray(want)
        if have.dtype != want.dtype:
            problems.append(f"{name}: dtype {have.dtype}, ORT {want.dtype}")
            continue
        if have.shape != want.shape:
            problems.append(f"{name}: shape {list(have.shape)}, ORT {list(want.shape)}")
            continue
        dt = str(want.dtype)
        if dt in TOL:
            rtol, atol = TOL["float16" if name in g.builder.low else dt]
            a, w = have.astype(np.float64), want.astype(np.float64)
            if not np.array_equal(np.isnan(a), np.isnan(w)):
                problems.append(f"{name}: NaN at other positions ({int(np.isnan(a).sum())} vs ORT {int(np.isnan(w).sum())})")
                continue
            fin = np.isfinite(w)
            if not np.array_equal(np.isinf(a), np.isinf(w)) or not np.array_equal(a[np.isinf(w)], w[np.isinf(w)]):
                problems.append(f"{name}: infinities differ")
                continue
            err = np.abs(a[fin] - w[fin]) - (atol + rtol * np.abs(w[fin]))
            if err.size and err.max() > 0:
                k = int(np.argmax(err))
                problems.append(f"{name}: max excess {err.max():.3g} (memplan {a[fin][k]:.9g}, ORT {w[fin][k]:.9g})")
        elif not np.array_equal(have, want):
            problems.append(f"{name}: {int((have != want).sum())} of {want.size} values differ")
    for name, want in g.ref.items():
        if name in shapes and list(shapes[name]) != list(np.asarray(want).shape):
            problems.append(f"{name}: inferred shape {list(shapes[name])}, ORT {list(np.asarray(want).shape)}")
    return problems


def combine(graphs):
    """One model holding every graph under the prefix g<seed>_ (they share the opset)."""
    nodes, inputs, inits, outputs, values = [], [], [], [], {}
    for g in graphs:
        m = onnx.compose.add_prefix(g.model, f"g{g.seed}_")
        nodes += m.graph.node
        inputs += m.graph.input
        inits += m.graph.initializer
        outputs += m.graph.output
        for k, v in g.inputs_values().items():
            values[f"g{g.seed}_{k}"] = v
    gr = helper.make_graph(nodes, "difftest_batch", inputs, outputs, initializer=inits)
    return helper.make_model(gr, opset_imports=graphs[0].model.opset_import, ir_version=8), values


def run_memplan(memplan, model, values, tmp, tag):
    """(rc, stderr, {output: array}, {tensor: shape}) of `memplan run` and `memplan analyze --json --shapes`."""
    path = os.path.join(tmp, f"{tag}.onnx")
    onnx.save(model, path)
    args = ["run", path]
    for k, i in enumerate(model.graph.input):
        p = os.path.join(tmp, f"{tag}.in{k}.npy")
        np.save(p, values[i.name])
        args += ["--input", p]
    outs = [os.path.join(tmp, f"{tag}.out{k}.npy") for k in range(len(model.graph.output))]
    for p in outs:
        args += ["--output", p]
    rc, _, err = memplan_cmd(memplan, args)
    if rc != 0:
        return rc, err, None, None
    got = {o.name: np.load(p) for o, p in zip(model.graph.output, outs)}
    rc, out, err = memplan_cmd(memplan, ["analyze", path, "--json", "--shapes"])
    if rc != 0:
        return rc, "analyze: " + err, None, None
    shapes = {k: v["shape"] for k, v in json.loads(out).get("tensor_shapes", {}).items()}
    return 0, "", got, shapes


def judge_alone(memplan, g, tmp):
    rc, err, got, shapes = run_memplan(memplan, g.model, g.inputs_values(), tmp, f"s{g.seed}")
    if rc == 0:
        problems = compare(g, got, shapes)
        g.verdict, g.detail = ("disagree", "; ".join(problems)) if problems else ("agree", "")
    elif is_crash(rc):
        g.verdict, g.detail = "crash", f"exit {rc}: {err.strip()[:300]}"
    else:
        g.verdict, g.detail = "refused", reason_of(err)


def judge_batch(memplan, graphs, tmp):
    """Sets each graph's verdict: one memplan run for the batch. A refusal that names one graph's op or tensor
    refuses that graph and the batch reruns without it; any other failure halves the batch until each failing
    graph runs alone."""
    live = [g for g in graphs if g.verdict is None]
    if not live:
        return
    if len(live) == 1:
        judge_alone(memplan, live[0], tmp)
        return
    model, values = combine(live)
    rc, err, got, shapes = run_memplan(memplan, model, values, tmp, "batch")
    if rc != 0 and not is_crash(rc):
        # A refusal names the op or tensor, so its graph by the name prefix: that graph is refused, the rest rerun.
        named = {m for m in re.findall(r"'g(\d+)_", err)}
        culprit = [g for g in live if str(g.seed) in named]
        if len(culprit) == 1:
            culprit[0].verdict, culprit[0].detail = "refused", reason_of(err)
            judge_batch(memplan, [g for g in live if g is not culprit[0]], tmp)
            return
    if rc != 0:
        half = len(live) // 2
        judge_batch(memplan, live[:half], tmp)
        judge_batch(memplan, live[half:], tmp)
        return
    for g in live:
        pre = f"g{g.seed}_"
        mine = {k[len(pre):]: v for k, v in got.items() if k.startswith(pre)}
        sh = {k[len(pre):]: v for k, v in shapes.items() if k.startswith(pre)}
        problems = compare(g, mine, sh)
        g.verdict, g.detail = ("disagree", "; ".join(problems)) if problems else ("agree", "")
    # A disagreement in a batch is confirmed alone (the reproducer is the graph by itself).
    for g in live:
        if g.verdict == "disagree":
            judge_alone(memplan, g, tmp)


def minimize(memplan, g, tmp):
    """The shortest prefix of g's ops (pruned to the last op's ancestors) that still fails the same way."""
    b = g.builder
    nodes = list(g.model.graph.node)
    for k in range(1, len(nodes) + 1):
        keep = prune(nodes[:k])
        m = sub_model(g.model, keep, b)
        h = Graph.__new__(Graph)
        h.seed, h.builder, h.verdict, h.detail = g.seed, b, None, ""
        h.reference(m)
        if h.verdict == "skipped":
            continue
        judge_alone(memplan, h, tmp)
        if h.verdict == g.verdict:
            return h
    return g


def prune(nodes):
    """The nodes the last one depends on (with itself)."""
    need = set(nodes[-1].input)
    keep = [nodes[-1]]
    for n in reversed(nodes[:-1]):
        if need & set(n.output):
            keep.append(n)
            need |= set(n.input)
    return list(reversed(keep))


def sub_model(model, nodes, builder):
    used = {i for n in nodes for i in n.input}
    produced = [o for n in nodes for o in n.output if o]
    consumed = used
    outs = [o for o in produced if o not in consumed or o in nodes[-1].output]
    g = helper.make_graph(nodes, model.graph.name, [i for i in model.graph.input if i.name in used],
                          [builder.value_info(o) for o in outs],
                          initializer=[t for t in model.graph.initializer if t.name in used])
    m = helper.make_model(g, opset_imports=model.opset_import, ir_version=model.ir_version)
    if not m.graph.input:
        return model  # memplan run needs one input at least: keep the whole graph
    return m


def write_repro(g, folder):
    """The graph and its inputs under folder/seed<S>.*; returns the command that shows the problem."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"seed{g.seed}.onnx")
    onnx.save(g.model, path)
    cmd = f"memplan run {path}"
    for k, i in enumerate(g.model.graph.input):
        p = os.path.join(folder, f"seed{g.seed}.in{k}.npy")
        np.save(p, g.inputs_values()[i.name])
        cmd += f" --input {p}"
    return cmd


def run_seeds(memplan, seeds, ops, batch=16):
    """Verdicts for `seeds`: [(seed, verdict, detail, op types, graph)]; graphs that fail are kept for repros."""
    out = []
    with tempfile.TemporaryDirectory(prefix="difftest") as tmp:
        graphs = [Graph(s, ops) for s in seeds]
        by_opset = {}
        for g in graphs:
            if g.verdict is None:
                by_opset.setdefault(g.builder.opset, []).append(g)
        for group in by_opset.values():
            for k in range(0, len(group), batch):
                judge_batch(memplan, group[k:k + batch], tmp)
        for g in graphs:
            if g.verdict in ("disagree", "crash"):
                g = minimize(memplan, g, tmp)
            out.append((g.seed, g.verdict, g.detail, g.ops() if g.model is not None else [],
                        g if g.verdict in ("disagree", "crash") else None))
    return out


def load_ops(memplan):
    rc, out, err = memplan_cmd(memplan, ["ops", "--json"])
    if rc != 0:
        raise RuntimeError(f"memplan ops --json exited {rc}: {err}")
    return lib.registry_ops(json.loads(out))
