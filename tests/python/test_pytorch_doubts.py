#!/usr/bin/env python3
"""`memplan plan --train` says where its model of PyTorch eager guesses (JSON pytorch_peak_doubts, text "unsure"):
SiLU/HardSwish/Mish written as x * f(x), softmax attention the SDPA matcher does not take, and nothing for a
plain MLP. Small ONNX graphs built with onnx.helper; exit 77 without onnx."""
import json
import os
import subprocess
import sys
import tempfile

from torch_testlib import Results, args

A = args()
try:
    import onnx
    from onnx import TensorProto, helper
except ImportError:
    print("skip: onnx is not importable")
    sys.exit(77)


def model(nodes, inits, out_shape):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)
    g = helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def weight(name, shape):
    import numpy as np

    return onnx.numpy_helper.from_array(np.full(shape, 0.01, dtype="float32"), name)


def doubts(m):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "m.onnx")
        onnx.save(m, p)
        r = subprocess.run([A.memplan, "plan", p, "--train", "--json"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        t = subprocess.run([A.memplan, "plan", p, "--train"], capture_output=True, text=True, timeout=120)
        j = json.loads(r.stdout)
        kinds = {d["kind"]: d["count"] for d in j["pytorch_peak_doubts"]}
        lines = [line for line in t.stdout.splitlines() if "unsure:" in line]
        assert len(lines) == len(kinds), (lines, kinds)
        return kinds


def silu_gate():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Sigmoid", ["h"], ["s"]),
             helper.make_node("Mul", ["h", "s"], ["a"]), helper.make_node("MatMul", ["a", "w2"], ["y"])]
    k = doubts(model(nodes, [weight("w", [32, 64]), weight("w2", [64, 32])], [8, 16, 32]))
    assert k == {"activation": 1}, k


def peak(m, *extra):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "m.onnx")
        onnx.save(m, p)
        r = subprocess.run([A.memplan, "plan", p, "--train", "--json", *extra], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["pytorch_peak_bytes"]


def gated_as_one_kernel():
    # F.silu and F.mish as exported: PyTorch runs one kernel whose backward saves x, as its Elu does; written out
    # op by op the gate (x's size) would be saved too
    def net(act_nodes):
        nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), *act_nodes, helper.make_node("MatMul", ["a", "w2"], ["y"])]
        return model(nodes, [weight("w", [32, 64]), weight("w2", [64, 32])], [8, 16, 32])
    elu = peak(net([helper.make_node("Elu", ["h"], ["a"])]))
    silu = peak(net([helper.make_node("Sigmoid", ["h"], ["s"]), helper.make_node("Mul", ["h", "s"], ["a"])]))
    mish_ = peak(net([helper.make_node("Softplus", ["h"], ["sp"]), helper.make_node("Tanh", ["sp"], ["t"]),
                      helper.make_node("Mul", ["t", "h"], ["a"])]))
    assert silu == elu and mish_ == elu, (silu, mish_, elu)
    # under autocast they are counted op by op (their backward rules run in float32): the plan still succeeds
    silu_net = net([helper.make_node("Sigmoid", ["h"], ["s"]), helper.make_node("Mul", ["h", "s"], ["a"])])
    assert peak(silu_net, "--precision", "bf16", "--optimizer", "adamw") > 0
    # the gate read twice is no library activation: op by op, above
    twice = peak(net([helper.make_node("Sigmoid", ["h"], ["s"]), helper.make_node("Mul", ["h", "s"], ["a0"]),
                      helper.make_node("Add", ["a0", "s"], ["a"])]))
    assert twice > elu, (twice, elu)


def mish():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Softplus", ["h"], ["sp"]),
             helper.make_node("Tanh", ["sp"], ["t"]), helper.make_node("Mul", ["h", "t"], ["y"])]
    k = doubts(model(nodes, [weight("w", [32, 32])], [8, 16, 32]))
    assert k == {"activation": 1}, k


def plain_mlp():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["a"]),
             helper.make_node("MatMul", ["a", "w2"], ["y"])]
    k = doubts(model(nodes, [weight("w", [32, 64]), weight("w2", [64, 32])], [8, 16, 32]))
    assert k == {}, k


def softmax_attention_over_the_wrong_axis():
    # scores = x @ x^T, softmax over axis 1 (not the keys' axis): no SDPA; counted as matmul, softmax, matmul
    nodes = [helper.make_node("MatMul", ["x", "w"], ["q"]),
             helper.make_node("Transpose", ["q"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Softmax", ["s"], ["p"], axis=1),
             helper.make_node("MatMul", ["p", "q"], ["y"])]
    k = doubts(model(nodes, [weight("w", [32, 32])], [8, 16, 32]))
    assert k.get("attention") == 1, k


R = Results()
R.run("x * sigmoid(x) is reported as a guessed activation", silu_gate)
R.run("x * sigmoid(x) and x * tanh(softplus(x)) are predicted as one kernel saving x (as an Elu)", gated_as_one_kernel)
R.run("x * tanh(softplus(x)) is reported as a guessed activation", mish)
R.run("a plain MLP has no doubts", plain_mlp)
R.run("softmax attention SDPA does not take is reported", softmax_attention_over_the_wrong_axis)
sys.exit(R.finish())
