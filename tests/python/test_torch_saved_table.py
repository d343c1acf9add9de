#!/usr/bin/env python3
"""memplan's backward rules save what PyTorch's autograd saves, held to a table generated from PyTorch's own
sources (scripts/gen_pytorch_saved.py: derivatives.yaml through torchgen's loader, kept in
samples/pytorch/saved_tensors.json for the pinned torch). For each ONNX op below and the ATen op PyTorch eager runs
for it, a small training step is planned (`memplan plan --train --no-fuse --save-plan`) and the forward tensors its
backward ops read (activations: the model's weights are resident either way) are compared with the tensors autograd
saves. Where the torch the table was made from is installed, the table is also regenerated and compared."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
except ImportError:
    print("skip: numpy and onnx are needed")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TABLE = os.path.join(REPO, "samples", "pytorch", "saved_tensors.json")

# ONNX op (opset, attributes, number of activation inputs) -> ATen op and how its saved names map to the ONNX op's
# inputs ("in0", "in1") and outputs ("out0", "out1", ...)
CASES = [
    ("Gelu", 20, {}, 1, "gelu", {"self": "in0"}),
    ("Sigmoid", 17, {}, 1, "sigmoid", {"result": "out0"}),
    ("Tanh", 17, {}, 1, "tanh", {"result": "out0"}),
    ("Relu", 17, {}, 1, "relu", {"result": "out0"}),
    ("Softplus", 17, {}, 1, "softplus", {"self": "in0"}),
    ("Elu", 17, {}, 1, "elu", {"self": "in0", "result": "out0"}),
    ("HardSigmoid", 17, {"alpha": 1.0 / 6, "beta": 0.5}, 1, "hardsigmoid", {"self": "in0"}),
    ("HardSwish", 17, {}, 1, "hardswish", {"self": "in0"}),
    ("Mish", 18, {}, 1, "mish", {"self": "in0"}),
    ("Exp", 17, {}, 1, "exp", {"result": "out0"}),
    ("Log", 17, {}, 1, "log", {"self": "in0"}),
    ("Sqrt", 17, {}, 1, "sqrt", {"result": "out0"}),
    ("Reciprocal", 17, {}, 1, "reciprocal", {"result": "out0"}),
    ("Erf", 17, {}, 1, "erf", {"self": "in0"}),
    ("Sin", 17, {}, 1, "sin", {"self": "in0"}),
    ("Cos", 17, {}, 1, "cos", {"self": "in0"}),
    ("Abs", 17, {}, 1, "abs", {"self": "in0"}),
    ("Softmax", 17, {"axis": -1}, 1, "_softmax", {"result": "out0"}),
    ("LogSoftmax", 17, {"axis": -1}, 1, "_log_softmax", {"result": "out0"}),
    ("Mul", 17, {}, 2, "mul.Tensor", {"self": "in0", "other": "in1"}),
    ("Div", 17, {}, 2, "div.Tensor", {"self": "in0", "other": "in1"}),
    ("Add", 17, {}, 2, "add.Tensor", {"self": "in0", "other": "in1"}),
    ("Sub", 17, {}, 2, "sub.Tensor", {"self": "in0", "other": "in1"}),
    ("MatMul", 17, {}, 2, "mm", {"self": "in0", "mat2": "in1"}),
    ("LayerNormalization", 17, {"axis": -1}, 1, "native_layer_norm", {"input": "in0", "result1": "out1", "result2": "out2"}),
    ("GroupNormalization", 21, {"num_groups": 2}, 1, "native_group_norm", {"input": "in0", "result1": "out1", "result2": "out2"}),
]
# Where memplan saves other tensors than autograd on purpose, with the reason (none today).
DIFFERENCES = {}


def one_op_model(path, op, opset, attrs, n_in):
    """x @ w_k -> h_k (activations that need a gradient), then the op over them; a [4, 8] float32 output."""
    nodes, inits = [], []

    def weight(name, shape, value):
        inits.append(helper.make_tensor(name, TensorProto.FLOAT, shape, np.full(shape, value, np.float32).tobytes(),
                                        raw=True))
        return name

    for k in range(n_in):
        weight(f"w{k}", [8, 8], 0.1 + 0.01 * k)
        # a matmul's second operand [8, 8] made from weights alone, so that it needs a gradient too
        left = weight("v", [8, 8], 0.2) if op == "MatMul" and k == 1 else "x"
        nodes.append(helper.make_node("MatMul", [left, f"w{k}"], [f"h{k}"], name=f"proj{k}"))
    ins = [f"h{k}" for k in range(n_in)]
    if op in ("LayerNormalization", "GroupNormalization"):  # per-feature (LayerNorm) or per-channel scale and bias
        ins += [weight("scale", [8], 1.0), weight("bias", [8], 0.0)]
    nodes.append(helper.make_node(op, ins, ["y"], name="op", **attrs))
    g = helper.make_graph(nodes, "one_op", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9), path)


def saved_by_memplan(memplan, path, plan_path):
    """The forward tensors the backward ops of node "op" read, as in0/in1/out0 names; None when it does not plan."""
    p = subprocess.run([memplan, "plan", path, "--train", "--loss", "mse", "--optimizer", "none", "--no-fuse",
                        "--save-plan", plan_path, "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip()[-300:]
    ops = json.load(open(plan_path))["graph"]["ops"]
    fwd = next(o for o in ops if o["name"] == "op")
    weights = {t["name"] for t in json.load(open(plan_path))["graph"].get("tensors", []) if t.get("role") == "weight"}
    weights |= {"scale", "bias"} | {f"w{k}" for k in range(2)} | {"v"}  # the model's initializers
    role = {t: f"in{i}" for i, t in enumerate(fwd["inputs"]) if t not in weights}
    role.update({t: f"out{i}" for i, t in enumerate(fwd["outputs"])})
    read = set()
    for o in ops:
        if o.get("phase") == "backward" and o["name"].startswith("op/"):
            read |= {role[t] for t in o["inputs"] if t in role}
    return read, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", default=os.path.join(REPO, "samples"))
    a = ap.parse_args()
    table = json.load(open(TABLE))
    failures = []
    with tempfile.TemporaryDirectory() as d:
        for op, opset, attrs, n_in, aten, names in CASES:
            model = os.path.join(d, f"{op}.onnx")
            one_op_model(model, op, opset, attrs, n_in)
            got, err = saved_by_memplan(a.memplan, model, os.path.join(d, f"{op}.plan.json"))
            entry = table["ops"].get(aten)
            if entry is None:
                failures.append(f"{aten}: not in the table")
                continue
            want = {names[n] for n in entry["inputs"] + entry["outputs"] if n in names}
            if got is None:
                failures.append(f"{op}: does not plan: {err}")
            elif got != want and DIFFERENCES.get(op) != (sorted(got), sorted(want)):
                failures.append(f"{op}: memplan's backward reads {sorted(got)}, PyTorch's {aten} saves {sorted(want)}")
            else:
                print(f"ok   {op} ({aten}): {sorted(got)}")
    # the table is PyTorch's: regenerated from the installed torch when it is the pinned version
    try:
        import torch
        if torch.__version__.split("+")[0] == table["torch"]:
            sys.path.insert(0, os.path.join(REPO, "scripts"))
            from gen_pytorch_saved import saved_table
            fresh = saved_table()
            if fresh["ops"] != table["ops"]:
                diff = sorted(k for k in set(fresh["ops"]) | set(table["ops"]) if fresh["ops"].get(k) != table["ops"].get(k))
                failures.append(f"samples/pytorch/saved_tensors.json differs from torch {table['torch']}'s: {diff[:8]}")
            else:
                print(f"ok   the table equals torch {table['torch']}'s derivatives.yaml ({len(fresh['ops'])} ops)")
        else:
            print(f"note: torch {torch.__version__} installed, the table is of {table['torch']}: not regenerated")
    except ImportError:
        print("note: torch is not installed: the table is not regenerated")
    for f in failures:
        print("FAIL:", f)
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
