#!/usr/bin/env python3
"""Hostile input, round 3 (issue 35): numbers from flags and the environment, misleading messages, all-or-nothing outputs.

Every number a flag or an environment variable gives is checked where it is read (type, range, meaning) and refused with
exit 2 (usage) naming the flag or variable and the accepted range (docs/errors.md, "Numbers on the command line");
degree products, microbatch counts and in-flight bytes never wrap; layouts beyond the GPU limit are refused at once.
Messages name the real cause (a pipeline cut moves off integer-only boundaries, a bf16 plan is its model's under the
same --precision, a rank-plans file is named as such, a directory is a directory, an opset-4 Reshape converts), and a
command whose output or standard output fails leaves nothing behind. Exit 77 when memplan, the samples or onnx are
missing.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:
    print("skip: numpy or onnx is not installed")
    sys.exit(77)

OK, USAGE, IO, INFEASIBLE, PLAN_MISMATCH = 0, 2, 3, 9, 10
CRASH_CODES = {70, 134, 136, 137, 139, -6, -8, -9, -11}
BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
FAST = ["--packer", "greedy_by_size", "--exact-pack-seconds", "0", "--library-bytes", "0"]


class Runner:
    def __init__(self, memplan, tmp):
        self.memplan, self.tmp, self.failures, self.count = memplan, tmp, 0, 0

    def run(self, args, env=None, stdout=None, timeout=120):
        e = dict(os.environ)
        for k in ("WORLD_SIZE", "MEMPLAN_WORLD_SIZE", "RANK", "MEMPLAN_RANK", "LOCAL_RANK", "MEMPLAN_NCCL_ID_FILE"):
            e.pop(k, None)
        e.update(env or {})
        try:
            r = subprocess.run([self.memplan, *args], stdout=stdout if stdout is not None else subprocess.PIPE,
                               stderr=subprocess.PIPE, env=e, timeout=timeout)
        except subprocess.TimeoutExpired:
            return -999, f"timed out after {timeout} s"
        return r.returncode, r.stderr.decode(errors="replace")

    def check(self, name, rc, err, expected, words=(), absent=(), left=()):
        self.count += 1
        missing = [w for w in words if w not in err]
        wrong = [w for w in absent if w in err]
        leftovers = [p for p in left if os.path.exists(p)]
        ok = rc == expected and not missing and not wrong and not leftovers and rc not in CRASH_CODES
        if not ok:
            self.failures += 1
        print(f"{'ok  ' if ok else 'FAIL'} {name}: exit {rc} (expected {expected})" +
              (f", message lacks {missing}" if missing else "") + (f", message says {wrong}" if wrong else "") +
              (f", left behind {leftovers}" if leftovers else "") + ("" if ok else f"\n     {err.strip()[:400]}"))
        return ok

    def path(self, name):
        return os.path.join(self.tmp, name)


def tiny_gpt(path):
    sys.path.insert(0, BENCH)
    import multi_gpu_plans
    multi_gpu_plans.build("gpt2", "batch", 32, path, dict(V=512, D=64, H=4, L=2, F=256, KV=4))


def integer_cut_model(path):
    """Two float streams (two activations cross every float boundary) joined by a Greater whose integer indices alone
    reach the second half: the points after the Greater and its Cast are the only ones where one activation crosses."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def mm(a, wname, out):
        inits.append(numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32) * 0.1, wname))
        nodes.append(helper.make_node("MatMul", [a, wname], [out], name=out))

    def blocks(a, b, ks):
        for k in ks:
            mm(a, f"wa{k}", f"ma{k}")
            mm(b, f"wb{k}", f"mb{k}")
            nodes.append(helper.make_node("Add", [f"ma{k}", b], [f"a{k}"], name=f"a{k}"))
            nodes.append(helper.make_node("Add", [f"mb{k}", a], [f"b{k}"], name=f"b{k}"))
            a, b = f"a{k}", f"b{k}"
        return a, b

    mm("x", "wa0", "a0")
    mm("x", "wb0", "b0")
    a, b = blocks("a0", "b0", range(1, 4))
    nodes.append(helper.make_node("Greater", [a, b], ["gt"], name="gt"))
    nodes.append(helper.make_node("Cast", ["gt"], ["idx"], name="idx", to=TensorProto.INT64))
    for s in ("a", "b"):
        inits.append(numpy_helper.from_array(rng.standard_normal((2, 64)).astype(np.float32) * 0.1, "e" + s))
        nodes.append(helper.make_node("Gather", ["e" + s, "idx"], ["g" + s], name="g" + s, axis=0))
        nodes.append(helper.make_node("ReduceSum", ["g" + s], ["s" + s], name="s" + s, axes=[1], keepdims=0))
    a, b = blocks("sa", "sb", range(4, 7))
    nodes.append(helper.make_node("Add", [a, b], ["y"], name="y"))
    g = helper.make_graph(nodes, "intcut", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def reshape_opset4(path):
    n = helper.make_node("Reshape", ["x"], ["y"], name="r", shape=[4, 2])
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 4)])
    m.ir_version = 3
    onnx.save(m, path)


# ---- 1: numbers from flags and the environment --------------------------------------------------------------------

def number_cases(r, gpt, mlp):
    plan = ["plan", gpt, "--train", "--dim", "batch=2", "--loss", "ce", *FAST]
    cases = [
        ("plan --gpus 0", plan + ["--gpus", "0"], ["--gpus", "1 .. 65536"]),
        ("plan --gpus -3", plan + ["--gpus", "-3"], ["--gpus", "1 .. 65536"]),
        ("viz --gpus 0", ["viz", gpt, "--train", "--dim", "batch=2", "--loss", "ce", *FAST, "--gpus", "0", "-o", r.path("v0.svg")],
         ["--gpus", "1 .. 65536"]),
        ("plan --tp 0 names --tp", plan + ["--tp", "0"], ["--tp 0", "1 .. 65536"]),
        ("plan --pp -1 names --pp", plan + ["--pp", "-1"], ["--pp -1"]),
        ("--tp x --pp wrapping to 0", plan + ["--tp", "65536", "--pp", "65536"], ["--tp x --pp", "4294967296"]),
        ("--tp x --pp with --gpus", plan + ["--gpus", "8", "--tp", "4294967296", "--pp", "4294967296"], ["--tp", "1 .. 65536"]),
        ("plan --gpus 100000000", plan + ["--gpus", "100000000"], ["--gpus 100000000", "1 .. 65536"]),
        ("plan --gpus 2^31-1", plan + ["--gpus", "2147483647"], ["--gpus 2147483647", "1 .. 65536"]),
        ("--microbatches 2^31", plan + ["--microbatches", "2147483648"], ["--microbatches 2147483648", "1 .. 1048576"]),
        ("--microbatches 2^32+1 on a pipeline", plan + ["--gpus", "2", "--pp", "2", "--microbatches", "4294967297"],
         ["--microbatches 4294967297", "1 .. 1048576"]),
        ("--microbatches 0", plan + ["--microbatches", "0"], ["--microbatches 0"]),
        ("--zero 7 on plan --gpus", plan + ["--gpus", "2", "--zero", "7"], ["--zero 7"]),
        ("--class-axis 99", plan + ["--class-axis", "99"], ["--class-axis 99", "-3 .. 2"]),
        ("--lr nan", plan + ["--lr", "nan"], ["--lr", "finite"]),
        ("--lr -0.5", plan + ["--lr", "-0.5"], ["--lr -0.5", "0 .. 1000000"]),
        ("--lr inf", plan + ["--lr", "inf"], ["--lr"]),
        ("--weight-decay inf", plan + ["--weight-decay", "inf"], ["--weight-decay", "finite"]),
        ("--weight-decay nan", plan + ["--weight-decay", "nan"], ["--weight-decay"]),
        ("--exact-gap nan", plan + ["--strategy", "exact", "--exact-gap", "nan"], ["--exact-gap", "0 .. 1"]),
        ("--exact-gap 2", plan + ["--exact-gap", "2"], ["--exact-gap 2", "0 .. 1"]),
        ("--exact-seconds -1", plan + ["--exact-seconds", "-1"], ["--exact-seconds -1"]),
        ("--exact-seconds nan", plan + ["--exact-seconds", "nan"], ["--exact-seconds"]),
        ("--exact-stages -1", plan + ["--exact-stages", "-1"], ["--exact-stages -1"]),
        ("--exact-nodes -1", plan + ["--exact-nodes", "-1"], ["--exact-nodes -1"]),
        ("--exact-pack-nodes -1", ["analyze", mlp, "--exact-pack-nodes", "-1"], ["--exact-pack-nodes -1", "0 .. 1000000000000"]),
        ("--exact-pack-seconds -1", ["analyze", mlp, "--exact-pack-seconds", "-1"], ["--exact-pack-seconds -1", "0 .. 3600"]),
        ("--exact-pack-seconds nan", ["analyze", mlp, "--exact-pack-seconds", "nan"], ["--exact-pack-seconds", "finite"]),
    ]
    for name, args, words in cases:
        rc, err = r.run(args, timeout=60)
        r.check(name, rc, err, USAGE, words)

    train = ["train", mlp, "--steps", "1"]
    env_cases = [
        ("train --gpus 0", train + ["--gpus", "0"], {}, ["--gpus 0", "1 .. 65536"]),
        ("train --gpus -3", train + ["--gpus", "-3"], {}, ["--gpus -3"]),
        ("train --dp-world 0 (old name)", train + ["--dp-world", "0"], {}, ["--gpus 0"]),
        ("train --rank -2", train + ["--rank", "-2"], {}, ["--rank -2"]),
        ("train --dp-rank -2 (old name)", train + ["--dp-rank", "-2"], {}, ["--rank -2"]),
        ("train --rank 1 of a world of 1", train + ["--gpus", "1", "--rank", "1"], {}, ["--rank 1", "0 .. 0"]),
        ("WORLD_SIZE=abc", train, {"WORLD_SIZE": "abc"}, ["WORLD_SIZE", "abc", "not an integer"]),
        ("MEMPLAN_WORLD_SIZE=abc", train, {"MEMPLAN_WORLD_SIZE": "abc"}, ["MEMPLAN_WORLD_SIZE"]),
        ("WORLD_SIZE=0", train, {"WORLD_SIZE": "0"}, ["WORLD_SIZE", "1 .. 65536"]),
        ("WORLD_SIZE=2x", train, {"WORLD_SIZE": "2x"}, ["WORLD_SIZE"]),
        ("RANK=junk", train + ["--gpus", "1"], {"RANK": "junk"}, ["RANK", "junk"]),
        ("MEMPLAN_RANK=-1", train + ["--gpus", "1"], {"MEMPLAN_RANK": "-1"}, ["MEMPLAN_RANK"]),
        ("LOCAL_RANK=x", train, {"LOCAL_RANK": "x"}, ["LOCAL_RANK"]),
        ("train --steps 0", ["train", mlp, "--steps", "0"], {}, ["--steps 0"]),
        ("train --lr nan", train + ["--lr", "nan"], {}, ["--lr"]),
        ("train --lr -0.5", train + ["--lr", "-0.5"], {}, ["--lr -0.5"]),
        ("train --weight-decay inf", train + ["--weight-decay", "inf"], {}, ["--weight-decay"]),
    ]
    for name, args, env, words in env_cases:
        rc, err = r.run(args, env=env, timeout=60)
        r.check(name, rc, err, USAGE, words)

    # GPipe holds every microbatch's saved activations at once: past 2^64 bytes no budget is met (never wrapped to fit).
    big = ["plan", gpt, "--train", "--dim", "batch=268435456", "--loss", "ce", *FAST, "--gpus", "2", "--pp", "2",
           "--pp-schedule", "gpipe", "--microbatches", "1048576", "--strategy", "none"]
    rc, err = r.run(big + ["--budget", "80GiB", "--json"], timeout=120)
    r.check("GPipe in-flight bytes past 2^64 under a budget", rc, err, INFEASIBLE, ["microbatches in flight"])
    rc, err = r.run(big + ["--json"], timeout=120)
    r.check("GPipe in-flight bytes past 2^64 without a budget", rc, err, 8, ["2^64"])


# ---- 2: messages that name the real cause ---------------------------------------------------------------------------

def message_cases(r, gpt, intcut):
    # The balanced cut of 2 stages falls where only the ArgMax's integer indices cross: the cut moves to a float boundary.
    rc, err = r.run(["plan", intcut, "--train", "--dim", "batch=4", *FAST, "--gpus", "2", "--pp", "2", "--json"])
    r.check("pipeline cut off an integer-only boundary", rc, err, OK, absent=["no float output"])
    rc, err = r.run(["fit", intcut, "--train", "--dim", "batch=4", *FAST, "--max-gpus", "2", "--budget", "1GiB", "--json"])
    r.check("fit --max-gpus over a model with an integer-only boundary", rc, err, OK, absent=["no float output"])

    p16 = r.path("bf16.plan.json")
    common = [gpt, "--train", "--dim", "batch=2", "--loss", "ce", "--precision", "bf16", *FAST]
    rc, err = r.run(["plan", *common, "--save-plan", p16])
    if r.check("plan --precision bf16 --save-plan", rc, err, OK):
        rc, err = r.run(["viz", *common, "--plan", p16, "-o", r.path("bf16.svg")])
        r.check("viz accepts the bf16 plan of its own model under the same --precision", rc, err, OK)
        rc, err = r.run(["viz", gpt, "--train", "--dim", "batch=2", "--loss", "ce", *FAST, "--plan", p16, "-o", r.path("bf16b.svg")])
        r.check("viz of a bf16 plan without --precision names --precision", rc, err, PLAN_MISMATCH, ["--precision"])

    ranks = r.path("ranks.json")
    rc, err = r.run(["plan", gpt, "--train", "--dim", "batch=2", "--loss", "ce", *FAST, "--gpus", "2", "--save-plan", ranks])
    if r.check("plan --gpus 2 --save-plan", rc, err, OK):
        for cmd in ("trace", "graph"):
            rc, err = r.run([cmd, gpt, "--dim", "batch=2", "--plan", ranks, "-o", r.path(cmd + ".out")])
            r.check(f"{cmd} of a rank-plans file says what it is", rc, err, PLAN_MISMATCH, ["rank plans", "viz --plan"],
                    absent=["write it with"], left=[r.path(cmd + ".out")])

    rc, err = r.run(["plan", gpt, "--train", "--dim", "batch=2", "--loss", "ce", *FAST, "--device-profile", r.tmp])
    r.check("a device profile that is a directory", rc, err, IO, ["directory"])
    rc, err = r.run(["viz", gpt, "--dim", "batch=2", "--plan", r.tmp, "-o", r.path("dir.svg")])
    r.check("a plan that is a directory", rc, err, IO, ["directory"])

    m4 = r.path("reshape4.onnx")
    reshape_opset4(m4)
    rc, err = r.run(["analyze", m4, "--json"])
    r.check("an opset-4 Reshape with its shape attribute converts", rc, err, OK, ["converted to opset"], absent=["Constant"])


# ---- 3: all-or-nothing outputs --------------------------------------------------------------------------------------

def output_cases(r, gpt, mlp):
    if os.path.exists("/dev/full"):
        for name, args, target in (
                ("plan --gpus --save-plan, stdout full", ["plan", gpt, "--train", "--dim", "batch=2", "--loss", "ce", *FAST, "--gpus", "2"],
                 "ranks_full.json"),
                ("plan --save-plan, stdout full", ["plan", gpt, "--train", "--dim", "batch=2", "--loss", "ce", *FAST], "plan_full.json"),
                ("analyze --save-plan, stdout full", ["analyze", mlp], "analyze_full.json")):
            out = r.path(target)
            with open("/dev/full", "w") as full:
                rc, err = r.run(args + ["--save-plan", out], stdout=full)
            r.check(name, rc, err, IO, ["standard output"], left=[out])
        for cmd in ("viz", "trace", "graph"):
            out = r.path(cmd + "_full.out")
            with open("/dev/full", "w") as full:
                rc, err = r.run([cmd, mlp, "-o", out], stdout=full)
            r.check(f"{cmd} -o, stdout full", rc, err, IO, ["standard output"], left=[out])
        grads = r.path("grads_full")
        with open("/dev/full", "w") as full:
            rc, err = r.run(["train", mlp, "--steps", "1", "--save-grads", grads], stdout=full)
        r.check("train --save-grads, stdout full", rc, err, IO, ["standard output"], left=[grads])

    blocker = r.path("a_file")
    open(blocker, "w").write("not a folder")
    rc, err = r.run(["train", mlp, "--steps", "1", "--save-grads", blocker])
    r.check("train --save-grads over a file", rc, err, IO, ["--save-grads", blocker])
    rc, err = r.run(["train", mlp, "--steps", "1", "--save-grads", os.path.join(blocker, "sub")])
    r.check("train --save-grads under a file", rc, err, IO, ["--save-grads"])
    grads = r.path("grads")
    rc, err = r.run(["train", mlp, "--steps", "1", "--save-grads", grads])
    if r.check("train --save-grads", rc, err, OK):
        names = sorted(os.listdir(grads))
        whole = names and all(n.startswith("grad_") and n.endswith(".npy") for n in names)
        r.count += 1
        if not whole:
            r.failures += 1
        print(f"{'ok  ' if whole else 'FAIL'} train --save-grads writes only grad_K.npy files: {names}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=True)
    a = ap.parse_args()
    mlp = os.path.join(os.path.abspath(a.samples), "models", "tiny_mlp.onnx")
    if not os.path.exists(a.memplan) or not os.path.exists(mlp):
        print("skip: memplan or samples missing")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        r = Runner(os.path.abspath(a.memplan), tmp)
        gpt, intcut = r.path("tiny_gpt2.onnx"), r.path("intcut.onnx")
        try:
            tiny_gpt(gpt)
        except ImportError as e:
            print("skip:", e)
            return 77
        integer_cut_model(intcut)
        number_cases(r, gpt, mlp)
        message_cases(r, gpt, intcut)
        output_cases(r, gpt, mlp)
    print(f"{r.count - r.failures} of {r.count} cases ok")
    return 1 if r.failures else 0


if __name__ == "__main__":
    sys.exit(main())
