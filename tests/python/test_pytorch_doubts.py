#!/usr/bin/env python3
"""`memplan plan --train` says where its model of PyTorch eager guesses (JSON pytorch_peak_doubts, text "unsure"):
SiLU/HardSwish/Mish written as x * f(x), softmax attention the SDPA matcher does not take, attention not in SDPA's
exported form (counted op by op), and nothing for a plain MLP. Small ONNX graphs built with onnx.helper; exit 77 without onnx."""
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


def attention(scale_on):
    """softmax(Q K^T / sqrt(8)) V over x [2, 128, 32] (4 heads of 8), the scale on the scores (a model's Python) or
    on Q and K^T each (scaled_dot_product_attention as exported)."""
    import numpy as np

    c = lambda name, v, dt="float32": onnx.numpy_helper.from_array(np.array(v, dtype=dt), name)  # noqa: E731
    nodes, inits = [], [c("heads", [2, 128, 4, 8], "int64"), c("merged", [2, 128, 32], "int64"),
                        c("sqrt_d", 8 ** 0.5), c("root_s", 8 ** -0.25)]
    for t in "qkv":
        inits.append(weight("w" + t, [32, 32]))
        nodes += [helper.make_node("MatMul", ["x", "w" + t], [t + "0"]),
                  helper.make_node("Reshape", [t + "0", "heads"], [t + "1"]),
                  helper.make_node("Transpose", [t + "1"], [t], perm=[0, 2, 1, 3])]
    nodes.append(helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]))
    if scale_on == "scores":
        nodes += [helper.make_node("MatMul", ["q", "kt"], ["s0"]), helper.make_node("Div", ["s0", "sqrt_d"], ["scores"])]
    else:
        nodes += [helper.make_node("Mul", ["q", "root_s"], ["qs"]), helper.make_node("Mul", ["kt", "root_s"], ["kts"]),
                  helper.make_node("MatMul", ["qs", "kts"], ["scores"])]
    nodes += [helper.make_node("Softmax", ["scores"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["o"]),
              helper.make_node("Transpose", ["o"], ["o1"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["o1", "merged"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 128, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 128, 32])
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=inits),
                             opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def attention_written_in_python():
    # Hugging Face models without an SDPA path scale the scores; PyTorch eager runs their matmul, softmax, matmul
    # and keeps the probabilities for the backward, which SDPA's kernels never store.
    assert doubts(attention("scores")) == {"python_attention": 1}
    assert doubts(attention("q_and_k")) == {}
    probabilities = 2 * 4 * 128 * 128 * 4
    python, sdpa = peak(attention("scores")), peak(attention("q_and_k"))
    assert python >= sdpa + probabilities, (python, sdpa)


R = Results()
R.run("x * sigmoid(x) is reported as a guessed activation", silu_gate)
R.run("x * sigmoid(x) and x * tanh(softplus(x)) are predicted as one kernel saving x (as an Elu)", gated_as_one_kernel)
R.run("x * tanh(softplus(x)) is reported as a guessed activation", mish)
R.run("a plain MLP has no doubts", plain_mlp)
R.run("softmax attention SDPA does not take is reported", softmax_attention_over_the_wrong_axis)
R.run("attention scaled on the scores is the model's own: reported, and its probabilities kept", attention_written_in_python)
sys.exit(R.finish())
