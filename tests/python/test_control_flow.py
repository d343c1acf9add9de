# ONNX control flow (If, Loop, Scan): folded Ifs inlined (by a constant, from shapes), an unfolded If planned with
# its larger branch and said so, Loop and Scan unrolled where the trip count is known (`memplan run` against ONNX
# Runtime), a Loop whose trip count or condition is known only at run time refused (exit 5, naming the node), and a
# training step planned and run through an inlined If.
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError:
    print("skip: numpy, onnx or onnxruntime is not installed")
    sys.exit(77)

UNSUPPORTED = 5
F = TensorProto.FLOAT


def vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def save(tmp, name, nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = os.path.join(tmp, name + ".onnx")
    onnx.save(m, path)
    return path


def weight(name, shape, seed):
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.5, name)


def branch(name, nodes, out, shape):
    return helper.make_graph(nodes, name, [], [vi(out, shape)])


def if_const(tmp, taken):
    # then: relu(x @ w); else: sigmoid(x @ w) * 3. Both read x and w from the outer graph.
    then = branch("then", [helper.make_node("MatMul", ["x", "w"], ["t0"]), helper.make_node("Relu", ["t0"], ["t1"])], "t1", [2, 3])
    other = branch("else", [helper.make_node("MatMul", ["x", "w"], ["e0"]), helper.make_node("Sigmoid", ["e0"], ["e1"]),
                            const("three", np.float32(3)), helper.make_node("Mul", ["e1", "three"], ["e2"])], "e2", [2, 3])
    nodes = [const("c", np.array(taken)), helper.make_node("If", ["c"], ["y"], name="pick", then_branch=then, else_branch=other)]
    return save(tmp, f"if_const_{taken}", nodes, [vi("x", [2, 4])], [vi("y", None)], [weight("w", [4, 3], 1)])


def if_shape(tmp):
    # Whether dim 1 of x is 4, from Shape -> Gather -> Equal: then reshapes x to [b, 2, 2] (valid only for 4) and sums
    # the last axis; else takes its first two columns. The branch not taken never has to infer.
    then = branch("then", [const("to", np.array([0, 2, 2], dtype=np.int64)), helper.make_node("Reshape", ["x", "to"], ["r"]),
                           helper.make_node("ReduceSum", ["r", "ax"], ["s"], keepdims=0)], "s", ["b", 2])
    other = branch("else", [const("st", np.array([0], dtype=np.int64)), const("en", np.array([2], dtype=np.int64)),
                            const("a1", np.array([1], dtype=np.int64)), helper.make_node("Slice", ["x", "st", "en", "a1"], ["s2"])], "s2", ["b", 2])
    nodes = [helper.make_node("Shape", ["x"], ["shp"]), const("one", np.int64(1)), helper.make_node("Gather", ["shp", "one"], ["n"]),
             const("four", np.int64(4)), helper.make_node("Equal", ["n", "four"], ["c"]), const("ax", np.array([2], dtype=np.int64)),
             helper.make_node("If", ["c"], ["y"], name="by_shape", then_branch=then, else_branch=other)]
    return save(tmp, "if_shape", nodes, [vi("x", ["b", "n"])], [vi("y", None)])


def if_unknown(tmp, wide_then):
    # The condition is an input: a wide branch (x @ w: 4096 columns, then summed) and a narrow one (x summed).
    wide = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("ReduceSum", ["m", "ax"], ["o"], keepdims=1)]
    narrow = [helper.make_node("ReduceSum", ["x", "ax"], ["o2"], keepdims=1)]
    then, other = (branch("then", wide, "o", [64, 1]), branch("else", narrow, "o2", [64, 1])) if wide_then else \
        (branch("then", narrow, "o2", [64, 1]), branch("else", wide, "o", [64, 1]))
    nodes = [const("ax", np.array([1], dtype=np.int64)),
             helper.make_node("If", ["c"], ["y"], name="unknown", then_branch=then, else_branch=other)]
    return save(tmp, f"if_unknown_{wide_then}", nodes, [vi("c", [], TensorProto.BOOL), vi("x", [64, 32])], [vi("y", None)],
                [weight("w", [32, 4096], 2)])


def loop_body(cond_nodes):
    # iteration i, condition, carried y: y' = tanh(y @ w) + i; scans y' out.
    nodes = [helper.make_node("MatMul", ["y", "w"], ["m"]), helper.make_node("Tanh", ["m"], ["th"]),
             helper.make_node("Cast", ["i"], ["fi"], to=F), helper.make_node("Add", ["th", "fi"], ["y2"]),
             helper.make_node("Identity", ["y2"], ["row"])] + cond_nodes
    return helper.make_graph(nodes, "body", [vi("i", [], TensorProto.INT64), vi("cond", [], TensorProto.BOOL), vi("y", [2, 3])],
                             [vi("cond_out", [], TensorProto.BOOL), vi("y2", [2, 3]), vi("row", [2, 3])])


def loop_model(tmp, name, trip_input, cond_nodes):
    nodes = [const("t", np.array(True))]
    inputs = [vi("x", [2, 3])]
    if trip_input:
        inputs.append(vi("M", [], TensorProto.INT64))
    else:
        nodes.append(const("M", np.int64(3)))
    nodes.append(helper.make_node("Loop", ["M", "t", "x"], ["y", "rows"], name="loop", body=loop_body(cond_nodes)))
    return save(tmp, name, nodes, inputs, [vi("y", None), vi("rows", None)], [weight("w", [3, 3], 3)])


def loop_nested(tmp):
    # A Loop of 2 whose body holds an If on a constant; the taken branch reads the body's carried value and the
    # outer weight, so splicing must rename its reads along with the iteration.
    then = branch("then", [helper.make_node("MatMul", ["y", "w"], ["p"]), helper.make_node("Relu", ["p"], ["q"])], "q", [2, 3])
    other = branch("else", [helper.make_node("Neg", ["y"], ["q2"])], "q2", [2, 3])
    body = helper.make_graph([const("k", np.array(True)), helper.make_node("If", ["k"], ["y2"], name="inner", then_branch=then,
                                                                            else_branch=other),
                              helper.make_node("Identity", ["cond"], ["cond_out"])],
                             "body", [vi("i", [], TensorProto.INT64), vi("cond", [], TensorProto.BOOL), vi("y", [2, 3])],
                             [vi("cond_out", [], TensorProto.BOOL), vi("y2", [2, 3])])
    nodes = [const("M", np.int64(2)), helper.make_node("Loop", ["M", "", "x"], ["y"], name="outer", body=body)]
    return save(tmp, "loop_nested", nodes, [vi("x", [2, 3])], [vi("y", None)], [weight("w", [3, 3], 8)])


def loop_bomb(tmp):
    # 1000 iterations of a body holding a Loop of 1000: unrolled in full, a million ops; refused at the limit.
    def body(inner):
        nodes = [helper.make_node("Identity", ["cond"], ["cond_out"])]
        if inner:
            nodes += [const("m2", np.int64(1000)), helper.make_node("Loop", ["m2", "", "y"], ["y2"], body=body(False))]
        else:
            nodes += [helper.make_node("Neg", ["y"], ["y2"])]
        return helper.make_graph(nodes, "body", [vi("i", [], TensorProto.INT64), vi("cond", [], TensorProto.BOOL), vi("y", [2])],
                                 [vi("cond_out", [], TensorProto.BOOL), vi("y2", [2])])
    nodes = [const("M", np.int64(1000)), helper.make_node("Loop", ["M", "", "x"], ["y"], name="outer", body=body(True))]
    return save(tmp, "loop_bomb", nodes, [vi("x", [2])], [vi("y", None)])


def scan_model(tmp):
    # Running sum of x's rows, read backwards, with each row's running sum scaled by w.
    body = helper.make_graph([helper.make_node("Add", ["s", "xt"], ["s2"]), helper.make_node("Mul", ["s2", "w"], ["out"])],
                             "body", [vi("s", [3]), vi("xt", [3])], [vi("s2", [3]), vi("out", [3])])
    nodes = [helper.make_node("Scan", ["s0", "x"], ["s", "ys"], name="scan", body=body, num_scan_inputs=1,
                              scan_input_directions=[1])]
    return save(tmp, "scan", nodes, [vi("s0", [3]), vi("x", [5, 3])], [vi("s", None), vi("ys", None)], [weight("w", [3], 4)])


class Checks:
    def __init__(self, memplan, tmp):
        self.memplan, self.tmp, self.failures = memplan, tmp, []

    def check(self, cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            self.failures.append(what)

    def cmd(self, *args):
        return subprocess.run([self.memplan, *args], capture_output=True, text=True, timeout=300)

    def run_vs_ort(self, what, model, feeds, *extra):
        sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        want = sess.run(None, feeds)
        args, outs = ["run", model, *extra], []
        for k, (name, value) in enumerate(feeds.items()):
            path = os.path.join(self.tmp, f"in{k}.npy")
            np.save(path, value)
            args += ["--input", path]
        for k in range(len(want)):
            outs.append(os.path.join(self.tmp, f"out{k}.npy"))
            args += ["-o", outs[-1]]
        r = self.cmd(*args)
        if r.returncode != 0:
            return self.check(False, f"{what}: memplan run exited {r.returncode}: {r.stderr.strip()[:300]}")
        for k, w in enumerate(want):
            got = np.load(outs[k])
            diff = float(np.max(np.abs(got.astype(np.float64) - w))) if w.size else 0.0
            self.check(got.shape == w.shape and diff <= 1e-5, f"{what}: output {k} {got.shape} vs onnxruntime {w.shape}, max diff {diff:.3g}")

    def analyze(self, model, *extra):
        r = self.cmd("analyze", model, "--json", *extra)
        return r, (json.loads(r.stdout) if r.returncode == 0 else None)


def check_ifs(c, tmp):
    x = np.random.default_rng(5).standard_normal((2, 4)).astype(np.float32)
    for taken in (True, False):
        m = if_const(tmp, taken)
        c.run_vs_ort(f"If on a constant {taken}", m, {"x": x})
        r, j = c.analyze(m)
        c.check(j is not None and j["notes"] == [] and j["plan_valid"], f"If on a constant {taken}: planned, no note ({r.stderr.strip()[:200]})")
    m = if_shape(tmp)
    for n in (4, 5):
        xs = np.random.default_rng(n).standard_normal((3, n)).astype(np.float32)
        c.run_vs_ort(f"If from a shape, n={n}", m, {"x": xs}, "--dim", "b=3", "--dim", f"n={n}")
        r, j = c.analyze(m, "--dim", "b=3", "--dim", f"n={n}")
        c.check(j is not None and j["notes"] == [], f"If from a shape, n={n}: folded, no note ({r.stderr.strip()[:200]})")
    for wide_then in (True, False):
        r, j = c.analyze(if_unknown(tmp, wide_then))
        chosen = "then" if wide_then else "else"
        note = (j or {}).get("notes", [""])[0] if j and j["notes"] else ""
        c.check(j is not None and j["plan_valid"] and "'unknown' (If)" in note and f"planned with its {chosen} branch" in note
                and "larger in memory" in note, f"unknown If: the wide {chosen} branch planned and said so: {note or r.stderr[:200]}")
        c.check(j is not None and j["lower_bound_bytes"] >= 64 * 4096 * 4, "unknown If: the wide branch's bytes are planned")
        c.check("warning" in r.stderr and "unknown" in r.stderr, "unknown If: a warning on stderr")


def check_loops(c, tmp):
    x = np.random.default_rng(6).standard_normal((2, 3)).astype(np.float32)
    m = loop_model(tmp, "loop_const", False, [helper.make_node("Identity", ["cond"], ["cond_out"])])
    c.run_vs_ort("Loop of 3 unrolled", m, {"x": x})
    r, j = c.analyze(m)
    c.check(j is not None and j["plan_valid"], f"Loop of 3: a verified plan ({r.stderr.strip()[:200]})")
    c.run_vs_ort("If inside a Loop body, unrolled and inlined", loop_nested(tmp), {"x": x})
    s = scan_model(tmp)
    c.run_vs_ort("Scan over 5 rows (reversed) unrolled", s, {"s0": np.ones(3, np.float32),
                                                             "x": np.random.default_rng(7).standard_normal((5, 3)).astype(np.float32)})
    refused = [("trip count from an input", loop_model(tmp, "loop_m_input", True, [helper.make_node("Identity", ["cond"], ["cond_out"])]),
                ["'loop' (Loop)", "trip count 'M'", "not known at planning time"]),
               ("condition from the data", loop_model(tmp, "loop_data_cond", False, [
                   helper.make_node("ReduceSum", ["y2"], ["total"], keepdims=0), const("lim", np.float32(1)),
                   helper.make_node("Less", ["total", "lim"], ["cond_out"])]), ["'loop' (Loop)", "computes the condition", "data-dependent"])]
    refused.append(("a Loop of 1000 inside a Loop of 1000", loop_bomb(tmp), ["(Loop)", "expands into more than", "added ops"]))
    for what, model, words in refused:
        r = c.cmd("analyze", model)
        c.check(r.returncode == UNSUPPORTED and all(w in r.stderr for w in words),
                f"Loop with {what}: exit {r.returncode} (5 expected), {r.stderr.strip()[:300]}")


def check_training(c, tmp):
    m = if_const(tmp, True)
    r = c.cmd("plan", m, "--train", "--loss", "mse", "--optimizer", "adam", "--json")
    j = json.loads(r.stdout) if r.returncode == 0 else None
    c.check(j is not None and j["plan_valid"] and j["notes"] == [], f"plan --train through an inlined If, verified ({r.stderr.strip()[:300]})")
    r = c.cmd("plan", if_unknown(tmp, False), "--train", "--loss", "mse", "--json")
    j = json.loads(r.stdout) if r.returncode == 0 else None
    c.check(j is not None and j["plan_valid"] and "planned with its else branch" in j["notes"][0],
            f"plan --train through an unknown If: the larger branch, verified, said ({r.stderr.strip()[:300]})")
    r = c.cmd("train", m, "--loss", "mse", "--steps", "3", "--json")
    t = json.loads(r.stdout) if r.returncode == 0 else None
    c.check(t is not None and len(t["losses"]) == 3 and all(np.isfinite(t["losses"])) and t["losses"][2] < t["losses"][0]
            and [(n["weight"], n["norm"] > 0) for n in t["gradient_norms"]] == [("w", True)],
            f"train through an inlined If: the loss falls, w (read inside the branch) gets a gradient "
            f"({t['losses'] if t else r.stderr.strip()[:300]})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        c = Checks(a.memplan, tmp)
        check_ifs(c, tmp)
        check_loops(c, tmp)
        check_training(c, tmp)
    print(f"{len(c.failures)} failures")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
