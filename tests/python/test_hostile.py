# Hostile inputs: each case must end with its documented exit code (docs/errors.md) and a message, never a crash.
import argparse
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

try:
    import onnx
    from onnx import TensorProto, helper
except ImportError:
    print("skip: the onnx Python package is not installed")
    sys.exit(77)

CRASH_CODES = {70, 134, 139}  # internal error, abort, segfault
# A sanitized memplan (scripts/test_sanitize.sh) may report and still exit with an accepted code (a leak found at
# exit, a recovered report): its report on stderr fails the case whatever the exit code.
SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer")
OK, USAGE, IO, MALFORMED, UNSUPPORTED, INVALID, SHAPE, OVERFLOW, INFEASIBLE, MISMATCH = 0, 2, 3, 4, 5, 6, 7, 8, 9, 10


# ---- model builders ------------------------------------------------------------------------------

def model(nodes, inputs, outputs, inits=(), opset=17, ir=8):
    g = helper.make_graph(list(nodes), "hostile", list(inputs), list(outputs), list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    return m.SerializeToString()


def vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def relu_model(shape=(2, 4), elem=TensorProto.FLOAT):
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", list(shape), elem)], [vi("y", None)])


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(num, payload):  # a length-delimited protobuf field
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def nested_bomb(depth):
    # ModelProto.graph -> GraphProto.node -> NodeProto.attribute -> AttributeProto.g -> GraphProto ... `depth` times.
    inner = field(1, field(4, b"Relu"))  # GraphProto { node { op_type } }
    for _ in range(depth):
        inner = field(1, field(5, field(6, inner)))  # GraphProto { node { attribute { g { inner } } } }
    return varint(1 << 3 | 0) + varint(8) + field(7, inner)  # ir_version 8, graph


def oversized_length():
    # A graph field that claims 3 GiB while the file holds a few bytes.
    return varint(1 << 3 | 0) + varint(8) + varint(7 << 3 | 2) + varint(3 << 30) + b"\x0a\x00"


def huge_initializer_mismatch():
    # 200,000 float values for dims [2]: the inline data does not match its dims.
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2])
    t.float_data.extend([0.0] * 200000)
    return model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [vi("x", [2])], [vi("y", None)], [t])


def huge_constant():
    # A Constant node whose dims promise 4 TiB and whose file holds no values: malformed, nothing allocated.
    t = TensorProto(name="v", data_type=TensorProto.FLOAT, dims=[1 << 20, 1 << 20])
    nodes = [helper.make_node("Constant", [], ["c"], name="const", value=t), helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    return model(nodes, [vi("x", [1])], [vi("y", None)])


def wide_node(n):
    # One Sum node with n inputs: a huge repeated field that is still a valid graph.
    return model([helper.make_node("Sum", ["x"] * n, ["y"], name="sum")], [vi("x", [4])], [vi("y", None)])


def external_model(location):
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1024, 4], data_location=TensorProto.EXTERNAL)
    for k, v in (("location", location), ("offset", "0"), ("length", str(1024 * 4 * 4))):
        e = w.external_data.add()
        e.key, e.value = k, v
    return model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [vi("x", [2, 1024])], [vi("y", None)], [w])


def json_graph(**over):
    doc = {"format": "memplan.graph", "version": 1, "name": "j", "inputs": ["x"], "outputs": ["y"],
           "tensors": [{"name": "x", "shape": [2, 4], "role": "input"}, {"name": "y"}],
           "ops": [{"name": "relu", "type": "Relu", "inputs": ["x"], "outputs": ["y"]}]}
    doc.update(over)
    return json.dumps(doc).encode()


# ---- the cases -----------------------------------------------------------------------------------
# (name, file bytes or a callable(dir) -> path, extra args, accepted exit codes, words stderr must contain)

def onnx_cases(samples):
    tiny = open(os.path.join(samples, "models", "tiny_mlp.onnx"), "rb").read()
    rng = random.Random(20261123)
    two = [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Sigmoid", ["x"], ["y"], name="b")]
    cycle = [helper.make_node("Add", ["x", "b"], ["a"], name="first"), helper.make_node("Relu", ["a"], ["b"], name="second")]
    return [
        ("truncated onnx", tiny[: len(tiny) // 2], [], {MALFORMED}, ["protobuf"]),
        ("truncated onnx (10 bytes)", tiny[:10], [], {MALFORMED}, []),
        ("empty file", b"", [], {MALFORMED}, []),
        ("random garbage", bytes(rng.getrandbits(8) for _ in range(4096)), [], {MALFORMED}, []),
        ("protobuf nested 5000 deep", nested_bomb(5000), [], {MALFORMED}, ["nested"]),
        ("protobuf nested 10 deep (subgraphs)", nested_bomb(10), [], {MALFORMED, UNSUPPORTED, INVALID}, []),
        ("length field claiming 3 GiB", oversized_length(), [], {MALFORMED}, []),
        ("200k values for dims [2]", huge_initializer_mismatch(), [], {MALFORMED}, ["'w'"]),
        ("Constant promising 4 TiB, holding nothing", huge_constant(), [], {MALFORMED}, ["const"]),
        ("Sum with 100k inputs", wide_node(100000), [], {OK}, []),
        ("cycle between nodes", model(cycle, [vi("x", [2])], [vi("b", None)]), [], {INVALID}, ["cycle"]),
        ("input no one produces",
         model([helper.make_node("Add", ["x", "ghost"], ["y"], name="add")], [vi("x", [2])], [vi("y", None)]),
         [], {INVALID}, ["ghost"]),
        ("two nodes produce one tensor", model(two, [vi("x", [2])], [vi("y", None)]), [], {INVALID}, ["'y'"]),
        ("initializer and node output share a name",
         model([helper.make_node("Relu", ["x"], ["w"], name="relu")], [vi("x", [2])], [vi("w", None)],
               [helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])]), [], {INVALID}, ["'w'"]),
        ("graph output nobody produces", model([], [vi("x", [2])], [vi("nowhere", None)]), [], {INVALID}, ["nowhere"]),
        ("negative input dim", relu_model((2, -3)), [], {OVERFLOW}, ["negative"]),
        ("negative initializer dim",
         model([helper.make_node("Relu", ["w"], ["y"], name="relu")], [], [vi("y", None)],
               [TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[-1])]), [], {OVERFLOW}, ["negative"]),
        ("bytes beyond 2^63", relu_model((1 << 30, 1 << 30, 16)), [], {OVERFLOW}, []),
        ("elements beyond 2^64", relu_model((1 << 40, 1 << 40)), [], {OVERFLOW}, []),
        ("unknown dtype 99", relu_model((2, 4), 99), [], {UNSUPPORTED}, ["99"]),
        ("unknown op type",
         model([helper.make_node("Frobnicate", ["x"], ["y"], name="frob")], [vi("x", [2])], [vi("y", None)]),
         [], {UNSUPPORTED}, ["Frobnicate"]),
        ("If on an input (planned with one branch)", if_model(), [], {OK}, []),
        ("Loop without a trip count", loop_model("Loop"), [], {UNSUPPORTED}, ["Loop", "trip count"]),
        ("Scan with a body (unrolled)", loop_model("Scan"), [], {OK}, []),
        ("opset 99", model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", None)], opset=99),
         [], {UNSUPPORTED}, ["opset"]),
        ("external data '../../etc/passwd' (never opened)", external_model("../../etc/passwd"), [], {OK}, []),
        ("external data in a FIFO (would hang if opened)", fifo_case, [], {OK}, []),
        ("json of another format", json_graph(format="tensorflow.graph"), [], {MISMATCH}, ["memplan.graph"]),
        ("json of version 2", json_graph(version=2), [], {MISMATCH}, ["version"]),
        ("json version as a string", json_graph(version="1"), [], {MISMATCH}, ["version"]),
        ("invalid json", b'{"format": "memplan.graph", "version": 1, "tensors": [', [], {MALFORMED}, ["JSON"]),
        ("json op reads a tensor not listed",
         json_graph(ops=[{"type": "Relu", "inputs": ["nope"], "outputs": ["y"]}]), [], {INVALID}, ["nope"]),
        ("json negative dim", json_graph(tensors=[{"name": "x", "shape": [2, -4], "role": "input"}, {"name": "y"}]),
         [], {OVERFLOW}, ["negative"]),
        ("json duplicate tensor", json_graph(tensors=[{"name": "x", "shape": [2], "role": "input"}, {"name": "y"},
                                                      {"name": "y"}]), [], {INVALID}, ["'y'"]),
        ("json int8 constant 1e10",
         json_graph(tensors=[{"name": "x", "shape": [1], "dtype": "int8", "role": "weight", "data": [1e10]}, {"name": "y"}]),
         [], {MALFORMED}, ["int8"]),
        ("json deeply nested", b"[" * 100000 + b"]" * 100000, [], {MALFORMED}, []),
    ]


def if_model():
    branch = helper.make_graph([helper.make_node("Relu", ["x"], ["z"])], "b", [], [vi("z", [2])])
    node = helper.make_node("If", ["c"], ["y"], name="cond", then_branch=branch, else_branch=branch)
    return model([node], [vi("c", [], TensorProto.BOOL), vi("x", [2])], [vi("y", None)])


def loop_model(kind):
    body = helper.make_graph([helper.make_node("Identity", ["s"], ["s2"])], "body", [vi("s", [2])], [vi("s2", [2])])
    if kind == "Loop":
        body = helper.make_graph([helper.make_node("Identity", ["c"], ["c2"]), helper.make_node("Identity", ["s"], ["s2"])],
                                 "body", [vi("i", [], TensorProto.INT64), vi("c", [], TensorProto.BOOL), vi("s", [2])],
                                 [vi("c2", [], TensorProto.BOOL), vi("s2", [2])])
        node = helper.make_node("Loop", ["", "", "x"], ["y"], name="loop", body=body)
    else:
        node = helper.make_node("Scan", ["x"], ["y"], name="scan", body=body, num_scan_inputs=1)
    return model([node], [vi("x", [2])], [vi("y", None)])


def fifo_case(d):
    os.mkfifo(os.path.join(d, "weights.fifo"))
    path = os.path.join(d, "fifo.onnx")
    with open(path, "wb") as f:
        f.write(external_model("weights.fifo"))
    return path


def dyn_model():
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", ["batch", 4])], [vi("y", None)])


def dim_cases():
    return [
        ("--dim batch=0", dyn_model(), ["--dim", "batch=0"], {USAGE}, ["batch"]),
        ("--dim batch=-1", dyn_model(), ["--dim", "batch=-1"], {USAGE}, ["batch"]),
        ("--dim batch=2^62", dyn_model(), ["--dim", "batch=%d" % (1 << 62)], {USAGE}, ["batch"]),
        ("--dim batch=2^64 (not an int64)", dyn_model(), ["--dim", "batch=%d" % (1 << 64)], {USAGE}, ["batch"]),
        ("--dim batch=abc", dyn_model(), ["--dim", "batch=abc"], {USAGE}, ["abc"]),
        ("--dim without =", dyn_model(), ["--dim", "batch"], {USAGE}, ["NAME=VALUE"]),
        ("--dim given twice", dyn_model(), ["--dim", "batch=2", "--dim", "batch=3"], {USAGE}, ["twice"]),
        ("unbound symbolic dim", dyn_model(), [], {SHAPE}, ["batch"]),
        ("missing model file", None, [], {IO}, ["cannot open"]),
        ("model is a directory", lambda d: d, [], {IO}, ["directory"]),
    ]


# ---- running -------------------------------------------------------------------------------------

class Runner:
    def __init__(self, memplan, tmp):
        self.memplan, self.tmp, self.failures, self.count = memplan, tmp, [], 0

    def run(self, args, timeout=30):
        t0 = time.time()
        try:
            p = subprocess.run([self.memplan] + args, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, "", time.time() - t0
        return p.returncode, p.stderr.decode(errors="replace"), time.time() - t0

    def check(self, name, rc, err, accepted, words, secs):
        self.count += 1
        problems = []
        if rc is None:
            problems.append("hung (timed out)")
        elif rc < 0 or rc in CRASH_CODES:
            problems.append("crashed with %s" % (("signal %s" % signal.Signals(-rc).name) if rc < 0 else rc))
        elif rc not in accepted:
            problems.append("exit %d, expected %s" % (rc, sorted(accepted)))
        problems += ["sanitizer report (%s)" % m for m in SANITIZER_REPORTS if m in err]
        if rc not in (None, 0):
            if "memplan: error" not in err and "Error" not in err and "error" not in err.lower():
                problems.append("no error message on stderr")
            for w in words:
                if w.lower() not in err.lower():
                    problems.append("stderr does not mention %r" % w)
        status = "ok  " if not problems else "FAIL"
        last = err.strip().splitlines()[-1][:110] if err.strip() else ""
        print("%s %-52s exit %-4s %.2fs  %s" % (status, name, rc, secs, last))
        if problems:
            self.failures.append("%s: %s\n    stderr: %s" % (name, "; ".join(problems), err.strip()[:400]))

    def summary(self, t0):
        # Prints the count and every failure; the exit status of the test.
        print("%d cases in %.1f s, %d failed" % (self.count, time.time() - t0, len(self.failures)))
        for f in self.failures:
            print("FAILED " + f)
        return 1 if self.failures else 0

    def case(self, name, content, args, accepted, words, cmd=("analyze",)):
        d = tempfile.mkdtemp(dir=self.tmp)
        if content is None:
            path = os.path.join(d, "does-not-exist.onnx")
        elif callable(content):
            path = content(d)
        else:
            path = os.path.join(d, "model.json" if content[:1] in (b"{", b"[") else "model.onnx")
            with open(path, "wb") as f:
                f.write(content)
        rc, err, secs = self.run(list(cmd) + [path] + list(args))
        self.check(name, rc, err, accepted, words, secs)
        return path


def commands(memplan):
    out = subprocess.run([memplan, "--help"], capture_output=True, text=True).stdout
    return out


def plan_reader_args(memplan, cmd, model_path, plan_path, out_dir):
    h = subprocess.run([memplan, cmd, "--help"], capture_output=True, text=True).stdout
    # --no-fuse: the plans are of the unfused model (see plan_checks), and `run` reads a plan against MODEL as it plans it.
    args = [cmd, model_path, "--plan", plan_path, "--no-fuse"]
    if "--input" in h:  # run: one .npy per graph input
        import numpy as np
        x = os.path.join(out_dir, "x.npy")
        np.save(x, np.ones((2, 64), dtype=np.float32))
        args += ["--input", x]
    elif "--output" in h:
        args += ["-o", os.path.join(out_dir, "out.svg")]
    return args


def plan_cases(r, samples):
    # Plans are written by `analyze --save-plan` (graph embedded); every command that reads one gets hostile plans.
    help_text = commands(r.memplan)
    readers = []
    for cmd in ("run", "viz", "trace"):  # graph reads plans through the same loader as viz and trace
        if ("\n  %s " % cmd) in help_text:
            h = subprocess.run([r.memplan, cmd, "--help"], capture_output=True, text=True).stdout
            if "--plan" in h:
                readers.append(cmd)
    d = tempfile.mkdtemp(dir=r.tmp)
    a, b = os.path.join(d, "a.onnx"), os.path.join(d, "b.onnx")
    with open(a, "wb") as f:
        # h and s are live together: a plan that puts both at offset 0 is wrong (planned with --no-fuse: fusion
        # would make the three ops one, with no intermediates to overlap).
        f.write(model([helper.make_node("Relu", ["x"], ["h"], name="relu"), helper.make_node("Sigmoid", ["h"], ["s"], name="sig"),
                       helper.make_node("Add", ["h", "s"], ["y"], name="add")], [vi("x", [2, 64])], [vi("y", None)]))
    with open(b, "wb") as f:
        f.write(model([helper.make_node("Sigmoid", ["x"], ["y"], name="sig")], [vi("x", [8, 8])], [vi("y", None)]))
    plan_a, plan_b = os.path.join(d, "a.plan.json"), os.path.join(d, "b.plan.json")
    for m, p in ((a, plan_a), (b, plan_b)):
        rc, err, secs = r.run(["analyze", m, "--save-plan", p, "--no-fuse"])
        r.check("analyze --save-plan writes a plan", rc, err, {OK}, [], secs)
        if rc != 0 or not os.path.exists(p):
            return
    if not readers:
        print("skip plan readers: no command reads --plan yet")
        return
    doc, other = json.load(open(plan_a)), json.load(open(plan_b))
    hostile = []

    def variant(name, mutate, accepted, words):
        path = os.path.join(d, name.replace(" ", "_") + ".json")
        x = json.loads(json.dumps(doc))
        text = mutate(x)
        with open(path, "w") as f:
            f.write(text if isinstance(text, str) else json.dumps(x))
        hostile.append((name, path, accepted, words))

    variant("plan of version 99", lambda x: x.update(version=99), {MISMATCH}, ["version"])
    variant("plan of another schema", lambda x: x.update(schema="other.plan"), {MISMATCH}, [])
    variant("plan for another model", lambda x: x.update(graph=other["graph"]), {MISMATCH}, [])
    variant("plan without its graph", lambda x: x.pop("graph"), {MISMATCH}, ["graph"])
    variant("truncated plan", lambda x: json.dumps(x)[:200], {MALFORMED}, [])
    variant("plan naming an unknown tensor", lambda x: rename_tensor(x), {MISMATCH, MALFORMED}, [])
    variant("plan with overlapping offsets", lambda x: overlap_offsets(x), {MISMATCH, MALFORMED, 11}, [])
    variant("plan with offsets near 2^64", lambda x: huge_offsets(x), {MISMATCH, MALFORMED, OVERFLOW, 11}, [])
    hostile.append(("plan file missing", os.path.join(d, "none.json"), {IO}, []))
    # Readers of the embedded graph (viz, trace) ignore MODEL; those that read the plan against MODEL (run) ignore
    # the embedded graph: each gets the hostile plans its kind can notice.
    embedded_only = {"plan for another model", "plan without its graph"}
    model_only = {"plan of another model file"}
    hostile.append(("plan of another model file", plan_b, {MISMATCH}, []))
    for cmd in readers:
        h = subprocess.run([r.memplan, cmd, "--help"], capture_output=True, text=True).stdout
        skip = model_only if "graph embedded" in h else embedded_only
        for name, path, accepted, words in hostile:
            if name in skip:
                continue
            rc, err, secs = r.run(plan_reader_args(r.memplan, cmd, a, path, d))
            r.check("%s --plan: %s" % (cmd, name), rc, err, accepted, words, secs)


def walk(x, fn):
    # Applies fn to every dict in a JSON value, depth first.
    if isinstance(x, dict):
        fn(x)
        for v in list(x.values()):
            walk(v, fn)
    elif isinstance(x, list):
        for v in x:
            walk(v, fn)


def rename_tensor(doc):
    def fn(o):
        if "tensor" in o and isinstance(o["tensor"], str):
            o["tensor"] = "no_such_tensor"
        if "tensors" in o and isinstance(o["tensors"], list) and o["tensors"] and isinstance(o["tensors"][0], str):
            o["tensors"][0] = "no_such_tensor"
    plan_only = {k: v for k, v in doc.items() if k != "graph"}
    walk(plan_only, fn)
    doc.update(plan_only)


def overlap_offsets(doc):
    def fn(o):
        if "offset" in o and isinstance(o["offset"], int):
            o["offset"] = 0
    plan_only = {k: v for k, v in doc.items() if k != "graph"}
    walk(plan_only, fn)
    doc.update(plan_only)


def huge_offsets(doc):
    def fn(o):
        if "offset" in o and isinstance(o["offset"], int):
            o["offset"] = (1 << 64) - 256
    plan_only = {k: v for k, v in doc.items() if k != "graph"}
    walk(plan_only, fn)
    doc.update(plan_only)


def budget_cases(r):
    help_text = commands(r.memplan)
    if "plan" not in help_text:
        print("skip infeasible --budget: no `plan` command yet")
        return
    h = subprocess.run([r.memplan, "plan", "--help"], capture_output=True, text=True).stdout
    if "--train" not in h or "--budget" not in h:
        print("skip infeasible --budget: `plan` has no --train/--budget yet")
        return
    d = tempfile.mkdtemp(dir=r.tmp)
    path = os.path.join(d, "mlp.onnx")
    w1 = helper.make_tensor("w1", TensorProto.FLOAT, [64, 256], [0.01] * (64 * 256))
    w2 = helper.make_tensor("w2", TensorProto.FLOAT, [256, 10], [0.01] * 2560)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"), helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    with open(path, "wb") as f:
        f.write(model(nodes, [vi("x", [32, 64])], [vi("y", None)], [w1, w2]))
    for budget, accepted, words in (("1", {INFEASIBLE}, ["budget"]), ("-5", {USAGE}, []), ("lots", {USAGE}, []),
                                    ("99999999999999999999999", {USAGE}, [])):
        rc, err, secs = r.run(["plan", "--train", path, "--budget", budget])
        r.check("plan --train --budget %s" % budget, rc, err, accepted, words, secs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=True)
    ap.add_argument("--keep", help="also write every hostile file into this folder (fuzzer seeds)")
    a = ap.parse_args()
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="memplan-hostile-")
    try:
        r = Runner(os.path.abspath(a.memplan), tmp)
        for c in onnx_cases(a.samples) + dim_cases():
            path = r.case(*c)
            if a.keep and os.path.isfile(path) and not path.endswith("fifo.onnx"):
                os.makedirs(a.keep, exist_ok=True)
                safe = "".join(ch if ch.isalnum() else "_" for ch in c[0])
                shutil.copy(path, os.path.join(a.keep, safe + os.path.splitext(path)[1]))
        plan_cases(r, a.samples)
        budget_cases(r)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return r.summary(t0)


if __name__ == "__main__":
    sys.exit(main())
