# Hostile input, round 2 (issue 16): each class of hostile file or command line ends with its documented exit code
# (docs/errors.md) and a message naming the problem, never a crash, a hang or silent acceptance.
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import test_hostile as th  # exits 77 when onnx is missing
from test_hostile import (IO, INVALID, MALFORMED, MISMATCH, OK, OVERFLOW, SHAPE, UNSUPPORTED, USAGE, TensorProto, helper,
                          model, vi)

try:
    import numpy as np
except ImportError:
    print("skip: numpy is not installed")
    sys.exit(77)


def npy_bytes(header, data, major=1, minor=0):
    # An .npy file with `header` padded as NumPy pads it; the header text is taken as given (it may be hostile).
    prefix = 10 if major == 1 else 12
    header = header + " " * (63 - (prefix + len(header)) % 64) + "\n"
    size = struct.pack("<H", len(header)) if major == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([major, minor]) + size + header.encode("latin1") + data


TWO = np.array([1.0, 2.0], dtype=np.float32).tobytes()
GOOD = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"


def relu2():
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", [2])], [vi("y", None)])


def two_outputs():
    return model([helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Neg", ["x"], ["b"], name="neg")],
                 [vi("x", [2])], [vi("a", None), vi("b", None)])


def npy_cases(r):
    # `run` reads each .npy through the regex-free parser; each case names its hostile header.
    d = tempfile.mkdtemp(dir=r.tmp)
    m = os.path.join(d, "relu.onnx")
    open(m, "wb").write(relu2())
    cases = [
        ("npy header of 60 KB (valid, v1.0)", npy_bytes(GOOD + " " * 60000, TWO), {OK}, []),
        ("npy header of 200 KB (valid, v2.0)", npy_bytes(GOOD + " " * 200000, TWO, major=2), {OK}, []),
        ("npy structured descr nested 30000 deep", npy_bytes("{'descr': " + "[" * 30000 + "]" * 30000 +
                                                             ", 'fortran_order': False, 'shape': (2,)}", TWO), {UNSUPPORTED}, ["structured"]),
        ("npy key given twice", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'shape': (1,)}", TWO),
         {MALFORMED}, ["twice"]),
        ("npy key inside a string value", npy_bytes("{'descr': \"<f4', 'shape': (2,), '\", 'fortran_order': False}", TWO),
         {MALFORMED}, ["shape"]),
        ("npy unknown key", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", TWO),
         {MALFORMED}, ["extra"]),
        ("npy shape (2) is no tuple", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2)}", TWO), {MALFORMED}, ["tuple"]),
        ("npy negative dim", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", TWO), {OVERFLOW}, ["negative"]),
        ("npy version 1.1", npy_bytes(GOOD, TWO, minor=1), {UNSUPPORTED}, ["version"]),
        ("npy version 4.0", npy_bytes(GOOD, TWO, major=4), {UNSUPPORTED}, ["version"]),
        ("npy header length beyond the file", b"\x93NUMPY\x01\x00\xff\xff{'descr'", {MALFORMED}, ["truncated"]),
        ("npy big-endian float", npy_bytes(GOOD.replace("<f4", ">f4"), TWO), {UNSUPPORTED}, [">f4"]),
        ("npy trailing garbage after the dict", npy_bytes(GOOD + " x", TWO), {MALFORMED}, ["after"]),
        ("npy data one byte short", npy_bytes(GOOD, TWO[:-1]), {MALFORMED}, ["bytes"]),
        ("npy of the wrong dtype for the input", npy_bytes(GOOD.replace("<f4", "<f8"), TWO + TWO), {USAGE}, ["float"]),
        ("npy of the wrong shape for the input", npy_bytes(GOOD.replace("(2,)", "(1,)"), TWO[:4]), {USAGE}, ["'x'"]),
    ]
    for name, content, accepted, words in cases:
        p = os.path.join(d, "in.npy")
        open(p, "wb").write(content)
        rc, err, secs = r.run(["run", m, "--input", p])
        r.check(name, rc, err, accepted, words, secs)
    rc, err, secs = r.run(["run", m])
    r.check("run without its --input", rc, err, {USAGE}, [], secs)
    good = os.path.join(d, "good.npy")
    np.save(good, np.ones(2, np.float32))
    rc, err, secs = r.run(["run", m, "--input", good, "--input", good])
    r.check("run with one --input too many", rc, err, {USAGE}, ["input"], secs)


def deep_json(depth):
    return b'{"format": "memplan.graph", "version": ' + b"[" * depth + b"]" * depth + b"}"


def json_graph(**over):
    return th.json_graph(**over)


def json_cases():
    relu = [{"name": "relu", "type": "Relu", "inputs": ["x"], "outputs": ["y"]}]
    return [
        ("json version nested 100000 deep", deep_json(100000), [], {MALFORMED}, ["nested"]),
        ("json version nested 60 deep (under the limit)", deep_json(60), [], {MISMATCH}, ["version"]),
        ("json key given twice", b'{"format": "memplan.graph", "version": 1, "version": 1, "tensors": [], "ops": [], "outputs": []}',
         [], {MALFORMED}, ["twice"]),
        ("json Flatten axis 1.5 (never truncated to 1)",
         json_graph(ops=[dict(relu[0], type="Flatten", attrs={"axis": 1.5})]), [], {MALFORMED}, ["axis"]),
        ("json Flatten axis 2^64 - 1 (never wrapped to -1)",
         json_graph(ops=[dict(relu[0], type="Flatten", attrs={"axis": (1 << 64) - 1})]), [], {MALFORMED}, ["axis"]),
        ("json attribute ints 2^64-1", json_graph(ops=[dict(relu[0], attrs={"perm": [1, (1 << 64) - 1]})]), [], {MALFORMED}, ["perm"]),
        ("json int64 data 2.5", json_graph(tensors=[{"name": "x", "shape": [2, 4], "role": "input"},
                                                    {"name": "k", "dtype": "int64", "shape": [1], "role": "weight", "data": [2.5]},
                                                    {"name": "y"}]), [], {MALFORMED}, ["int64"]),
        ("json int64 data 2^63", json_graph(tensors=[{"name": "x", "shape": [2, 4], "role": "input"},
                                                     {"name": "k", "dtype": "int64", "shape": [1], "role": "weight", "data": [1 << 63]},
                                                     {"name": "y"}]), [], {MALFORMED}, ["int64"]),
        ("json dim 2^64-1 (would wrap to -1)", json_graph(tensors=[{"name": "x", "shape": [2, (1 << 64) - 1], "role": "input"},
                                                                   {"name": "y"}]), [], {OVERFLOW}, ["dim"]),
        ("json dim 2.5", json_graph(tensors=[{"name": "x", "shape": [2, 2.5], "role": "input"}, {"name": "y"}]), [], {MALFORMED}, ["2.5"]),
        ("json version 1.0", json_graph(version=1.0), [], {MISMATCH}, ["version"]),
        ("json opset 99", json_graph(opset=99), [], {UNSUPPORTED}, ["opset"]),
        ("json opset 6", json_graph(opset=6), [], {UNSUPPORTED}, ["opset"]),
        ("json opset -1", json_graph(opset=-1), [], {UNSUPPORTED}, ["opset"]),
        ("json opset 17.5", json_graph(opset=17.5), [], {MALFORMED}, ["opset"]),
        ("json graph input an op also writes",
         json_graph(inputs=["x", "y"], tensors=[{"name": "x", "shape": [2, 4], "role": "input"}, {"name": "y", "shape": [2, 4]}]),
         [], {INVALID}, ["'y'"]),
        ("json Add of float32 and int64", json_graph(
            tensors=[{"name": "x", "shape": [2, 4], "role": "input"},
                     {"name": "k", "dtype": "int64", "shape": [2, 4], "role": "input"}, {"name": "y"}],
            inputs=["x", "k"], ops=[{"name": "add", "type": "Add", "inputs": ["x", "k"], "outputs": ["y"]}]),
         [], {SHAPE}, ["int64"]),
    ]


def constant_two_values():
    c = helper.make_node("Constant", [], ["c"], name="const", value_float=1.0, value_int=2)
    return model([c, helper.make_node("Add", ["x", "c"], ["y"], name="add")], [vi("x", [1])], [vi("y", None)])


def two_default_imports():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [vi("x", [2])], [vi("y", None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx", 13)])
    m.ir_version = 8
    return m.SerializeToString()


def renamed(content, old, new):
    # Replaces a name inside serialized protobuf bytes: the lengths must match so that the message stays valid.
    assert len(old) == len(new) and content.count(old) >= 1
    return content.replace(old, new)


def onnx_cases():
    maxpool = helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2], pads=[2, 2, 0, 0])
    mixed = model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [vi("x", [2, 3]), vi("w", [3, 4], TensorProto.DOUBLE)],
                  [vi("y", None)])
    # Names are placed with markers of equal length, then replaced by hostile bytes.
    marked = model([helper.make_node("Relu", ["x"], ["TNAME"], name="relu")], [vi("x", [2])], [vi("TNAME", None)])
    return [
        ("Constant with two value attributes", constant_two_values(), [], {MALFORMED}, ["value"]),
        ("graph input that a node also writes", model([helper.make_node("Relu", ["x"], ["y"], name="relu"),
                                                       helper.make_node("Neg", ["y"], ["x2"], name="neg")],
                                                      [vi("x", [2]), vi("y", [2])], [vi("x2", None)]), [], {INVALID}, ["'y'"]),
        ("two imports of the default domain", two_default_imports(), [], {MALFORMED}, ["default domain"]),
        ("MaxPool pads >= kernel", model([maxpool], [vi("x", [1, 1, 4, 4])], [vi("y", None)]), [], {SHAPE}, ["pads"]),
        ("MatMul of float32 and float64", mixed, [], {SHAPE}, ["float64"]),
        ("tensor name not UTF-8", renamed(marked, b"TNAME", b"T\xff\xfeAM"), [], {MALFORMED}, ["UTF-8", "tensor"]),
        ("tensor name overlong UTF-8", renamed(marked, b"TNAME", b"\xc0\xafNAM"), [], {MALFORMED}, ["UTF-8"]),
        ("tensor name not UTF-8, --json", renamed(marked, b"TNAME", b"T\xff\xfeAM"), ["--json"], {MALFORMED}, ["UTF-8"]),
    ]


def control_char_cases(r):
    # A name that would clear the screen and forge a line: shown escaped, in text output and in error messages.
    d = tempfile.mkdtemp(dir=r.tmp)
    m = os.path.join(d, "ctl.onnx")
    bad = "y\x1b[2J\nmemplan: ok\x07"
    open(m, "wb").write(model([helper.make_node("Relu", ["x"], [bad], name="relu")], [vi("x", [2, 4])], [vi(bad, None)]))
    p = subprocess.run([r.memplan, "analyze", m, "--top", "5"], capture_output=True)
    out = p.stdout.decode("utf-8", "replace")
    problems = []
    if p.returncode != 0:
        problems.append("exit %d" % p.returncode)
    if any(c in out for c in "\x1b\x07") or "\nmemplan: ok" in out:
        problems.append("control characters reach the text output")
    if "\\x1b[2J\\nmemplan: ok\\x07" not in out:
        problems.append("the escaped name is not shown")
    r.report("control characters in a tensor name (analyze text)", problems, p.stderr.decode("utf-8", "replace"))
    missing = os.path.join(d, "no\x1b[2Jsuch.onnx")
    rc, err, secs = r.run(["analyze", missing])
    r.check("control characters in a missing file's name", rc, err, {IO}, ["\\x1b[2J"], secs)
    if "\x1b" in err:
        r.report("control characters in an error message", ["ESC reaches stderr"], err)
    raw = os.path.join(d.encode(), b"\xff\xfe.onnx")  # a path that is not UTF-8 reaches the JSON writer
    shutil.copy(m, raw)
    for extra in (["--json"], ["--save-plan", os.path.join(d.encode(), b"p.json")]):
        p = subprocess.run([r.memplan.encode(), b"analyze", raw] + [x if isinstance(x, bytes) else x.encode() for x in extra],
                           capture_output=True)
        r.check("model path not UTF-8, analyze %s" % extra[0], p.returncode, p.stderr.decode("utf-8", "replace"), {OK}, [], 0.0)
    rc, err, secs = r.run(["analyze", m, "--bogus\x1b[2J"])
    r.check("control characters in an unknown option", rc, err, {USAGE}, ["\\x1b"], secs)
    if "\x1b" in err:
        r.report("control characters in CLI11's message", ["ESC reaches stderr"], err)


def output_cases(r):
    d = tempfile.mkdtemp(dir=r.tmp)
    m = os.path.join(d, "two.onnx")
    open(m, "wb").write(two_outputs())
    x = os.path.join(d, "x.npy")
    np.save(x, np.array([-1.0, 2.0], np.float32))
    out_dir = os.path.join(d, "out")
    os.mkdir(out_dir)
    a, b = os.path.join(out_dir, "a.npy"), os.path.join(out_dir, "b.npy")

    def listing():
        return sorted(os.listdir(out_dir))

    rc, err, secs = r.run(["run", m, "--input", x, "--output", a, "--output", os.path.join(d, "missing", "b.npy")])
    r.check("run whose second output's folder is missing", rc, err, {IO}, ["missing"], secs)
    if listing():
        r.report("run failing on its second output writes none", ["left %s" % listing()], err)
    if os.path.exists("/dev/full"):
        rc, err, secs = r.run(["run", m, "--input", x, "--output", a, "--output", "/dev/full"])
        r.check("run whose second output is /dev/full", rc, err, {IO}, ["/dev/full"], secs)
        if listing():
            r.report("run failing on a full device writes none", ["left %s" % listing()], err)
        rc, err, secs = r.run(["analyze", m, "--save-plan", "/dev/full"])
        r.check("analyze --save-plan /dev/full", rc, err, {IO}, ["/dev/full"], secs)
        with open("/dev/full", "w") as full:
            p = subprocess.run([r.memplan, "analyze", m, "--json"], stdout=full, stderr=subprocess.PIPE)
        r.check("analyze --json > /dev/full", p.returncode, p.stderr.decode(), {IO}, ["standard output"], 0.0)
        for cmd, flag in (("viz", "-o"), ("trace", "-o"), ("graph", "-o")):
            rc, err, secs = r.run([cmd, m, flag, "/dev/full"])
            r.check("%s %s /dev/full" % (cmd, flag), rc, err, {IO}, ["/dev/full"], secs)
    # An existing output survives a failed run unchanged, and a successful run leaves only its outputs.
    open(a, "wb").write(b"keep me")
    rc, err, secs = r.run(["run", m, "--input", x, "--output", a, "--output", os.path.join(d, "missing", "b.npy")])
    r.check("failed run over an existing output", rc, err, {IO}, [], secs)
    if open(a, "rb").read() != b"keep me":
        r.report("an existing output survives a failed run", ["it was overwritten"], err)
    rc, err, secs = r.run(["run", m, "--input", x, "--output", a, "--output", b])
    r.check("run writing two outputs", rc, err, {OK}, [], secs)
    if listing() != ["a.npy", "b.npy"] or not np.array_equal(np.load(a), np.array([0.0, 2.0], np.float32)):
        r.report("run writes both outputs whole and nothing else", ["folder holds %s" % listing()], err)


def external_cases(r):
    d = tempfile.mkdtemp(dir=r.tmp)
    p = os.path.join(d, "ext.onnx")
    open(p, "wb").write(th.external_model("../outside/weights.bin"))
    rc, err, secs = r.run(["analyze", p])
    r.check("external data outside the model's folder (analyze)", rc, err, {OK}, [], secs)
    problems = [] if ("warning" in err and "'w'" in err and "../outside/weights.bin" in err) else ["no warning naming tensor and path"]
    r.report("external data outside the folder is warned about", problems, err)
    open(p, "wb").write(th.external_model("/etc/passwd"))
    rc, err, secs = r.run(["analyze", p])
    r.check("external data at an absolute path (analyze)", rc, err, {OK}, [], secs)
    r.report("an absolute external path is warned about", [] if "/etc/passwd" in err and "warning" in err else ["no warning"], err)
    rc, err, secs = r.run(["run", p, "--input", os.path.join(d, "none.npy")])
    r.check("run refuses external data outside the folder", rc, err, {MALFORMED, IO}, [], secs)


def budget_cases(r):
    d = tempfile.mkdtemp(dir=r.tmp)
    m = os.path.join(d, "relu.onnx")
    open(m, "wb").write(relu2())
    for budget in ("", "   "):
        rc, err, secs = r.run(["plan", "--train", m, "--budget", budget])
        r.check("plan --train --budget %r" % budget, rc, err, {USAGE}, ["budget"], secs)


def plan_number_cases(r):
    d = tempfile.mkdtemp(dir=r.tmp)
    m = os.path.join(d, "a.onnx")
    open(m, "wb").write(model([helper.make_node("Relu", ["x"], ["h"], name="relu"), helper.make_node("Sigmoid", ["h"], ["y"], name="sig")],
                              [vi("x", [2, 64])], [vi("y", None)]))
    plan = os.path.join(d, "a.plan.json")
    rc, err, secs = r.run(["analyze", m, "--save-plan", plan, "--no-fuse"])
    r.check("analyze --save-plan writes a plan", rc, err, {OK}, [], secs)
    if rc != 0:
        return
    doc = json.load(open(plan))
    x = os.path.join(d, "x.npy")
    np.save(x, np.ones((2, 64), np.float32))

    def variant(name, mutate, accepted, words, text=None):
        v = json.loads(json.dumps(doc))
        mutate(v)
        p = os.path.join(d, "v.json")
        open(p, "w").write(text if text is not None else json.dumps(v))
        for cmd in (["run", m, "--plan", p, "--no-fuse", "--input", x], ["viz", m, "--plan", p, "--no-fuse", "-o", os.path.join(d, "o.svg")]):
            rc, err, secs = r.run(cmd)
            r.check("%s --plan: %s" % (cmd[0], name), rc, err, accepted, words, secs)

    def set_buffer(field, value):
        return lambda v: v["buffers"][0].__setitem__(field, value)

    variant("offset 64.5", set_buffer("offset", 64.5), {MALFORMED}, ["offset"])
    variant("offset -64", set_buffer("offset", -64), {MALFORMED}, ["offset"])
    variant("offset 2^64", set_buffer("offset", 1 << 64), {MALFORMED}, ["offset"])
    variant("first step -1", set_buffer("first", -1), {MALFORMED}, ["first"])
    variant("last step 2^32", set_buffer("last", 1 << 32), {MALFORMED}, ["last"])
    variant("size 1e3", set_buffer("size", 1e3), {MALFORMED}, ["size"])
    variant("version 2.5", lambda v: v.update(version=2.5), {MISMATCH}, ["version"])
    variant("version 2^64-1", lambda v: v.update(version=(1 << 64) - 1), {MISMATCH}, ["version"])
    text = json.dumps(doc)
    variant("key given twice", lambda v: None, {MALFORMED}, ["twice"], text=text.replace('"version":', '"version": 2, "version":', 1))
    variant("nested 100000 deep", lambda v: None, {MALFORMED}, ["nested"], text='{"schema": ' + "[" * 100000 + "]" * 100000 + "}")


class Runner(th.Runner):
    def report(self, name, problems, err):
        self.count += 1
        print("%s %-52s %s" % ("ok  " if not problems else "FAIL", name, "; ".join(problems)))
        if problems:
            self.failures.append("%s: %s\n    stderr: %s" % (name, "; ".join(problems), err.strip()[:400]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=True)
    a = ap.parse_args()
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="memplan-hostile-input-")
    try:
        r = Runner(os.path.abspath(a.memplan), tmp)
        for c in json_cases() + onnx_cases():
            r.case(*c)
        npy_cases(r)
        control_char_cases(r)
        output_cases(r)
        external_cases(r)
        budget_cases(r)
        plan_number_cases(r)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return r.summary(t0)


if __name__ == "__main__":
    sys.exit(main())
