#!/usr/bin/env python3
"""`memplan plan --train`'s pytorch_peak_bytes on forms PyTorch eager runs otherwise than memplan's own plans: a
LayerNorm the model writes as arithmetic (from opset 17 the exporters write F.layer_norm as one LayerNormalization)
and nn.Linear's bias over a 3-D input (one addmm node, whose bias gradient autograd sums after the matmul gradients).
Small ONNX graphs built with onnx.helper; exit 77 without onnx."""
import json
import os
import subprocess
import sys
import tempfile

from torch_testlib import REPO, Results, args

A = args()
try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
except ImportError:
    print("skip: onnx is not importable")
    sys.exit(77)
sys.path.insert(0, os.path.join(REPO, "python"))
from memplan_torch.cuda_kernels import reduction_staging_bytes  # noqa: E402  (no torch needed)


def const(name, v, dt="float32"):
    return onnx.numpy_helper.from_array(np.array(v, dtype=dt), name)


def model(nodes, inits, x_shape, y_shape, opset=17):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)
    g = helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def peak(m, *extra):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "m.onnx")
        onnx.save(m, p)
        r = subprocess.run([A.memplan, "plan", p, "--train", "--json", *extra], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["pytorch_peak_bytes"]


X = [8, 128, 64]


def layer_norm(decomposed, opset):
    """LayerNorm over the last axis of x, then a MatMul: as one LayerNormalization or written out."""
    inits = [const("w", np.ones(64)), const("b", np.zeros(64)), const("w2", np.full((64, 64), 0.01))]
    if decomposed:
        inits += [const("two", 2.0), const("eps", 1e-5)]
        axes = {"axes": [-1]} if opset < 18 else {}
        if opset >= 18:
            inits.append(const("last", [-1], "int64"))
        ins = (lambda t: [t, "last"]) if opset >= 18 else (lambda t: [t])
        nodes = [helper.make_node("ReduceMean", ins("x"), ["mu"], **axes),
                 helper.make_node("Sub", ["x", "mu"], ["d"]), helper.make_node("Pow", ["d", "two"], ["d2"]),
                 helper.make_node("ReduceMean", ins("d2"), ["var"], **axes),
                 helper.make_node("Add", ["var", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"]),
                 helper.make_node("Div", ["d", "sd"], ["n"]), helper.make_node("Mul", ["n", "w"], ["nw"]),
                 helper.make_node("Add", ["nw", "b"], ["h"])]
    else:
        nodes = [helper.make_node("LayerNormalization", ["x", "w", "b"], ["h"], axis=-1)]
    nodes.append(helper.make_node("MatMul", ["h", "w2"], ["y"]))
    return model(nodes, inits, X, X, opset)


def layer_norm_written_in_python():
    # From opset 17 the exporters write F.layer_norm whole: a decomposed one is the model's arithmetic, run op by op
    # (x - mean and the normalized x kept for the backward); below 17 the exporter decomposed F.layer_norm itself.
    library, python = peak(layer_norm(False, 17)), peak(layer_norm(True, 17))
    # at the backward's peak: x - mean kept in place of LayerNormalization's mean and inverse std
    assert python - library >= 8 * 128 * 64 * 4 - 2 * 8 * 128 * 4, (python, library)
    assert peak(layer_norm(True, 14)) == library


def linear(bias):
    """sum(h W^T (+ b)) with h = x W1 over x [4, 256, 64], W [4000, 64]: nn.Linear on a 3-D input, as exported."""
    inits = [const("W1", np.full((64, 64), 0.01)), const("W", np.full((4000, 64), 0.01))]
    inits += [const("b", np.zeros(4000))] if bias else []
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["h", "Wt"], ["y0"])]
    if bias:
        nodes.append(helper.make_node("Add", ["y0", "b"], ["y1"]))
    nodes.append(helper.make_node("ReduceSum", ["y1" if bias else "y0"], ["y"], keepdims=0))
    return model(nodes, inits, [4, 256, 64], [])


class Rows:
    shape = [1024, 4000]

    def dim(self):
        return 2

    def numel(self):
        return 1024 * 4000

    def element_size(self):
        return 4

    def stride(self):
        return [4000, 1]


def linear_bias_summed_after_its_matmul_gradients():
    # PyTorch's addmm node returns the input and weight gradients, then the engine sums the bias gradient over the
    # 1024 rows (a 32 MiB staging buffer): the sum's buffer comes on top of both gradients, not before them (where
    # it would fall in place of the weight gradient)
    staging, semaphores = reduction_staging_bytes("sum", Rows(), [0], 132, 2048)
    assert staging > 0
    with_bias = peak(linear(True), "--loss", "none", "--optimizer", "none")
    without = peak(linear(False), "--loss", "none", "--optimizer", "none")
    # without the bias the peak is at the weight gradient's matmul, which still reads h (freed before the sum)
    h = 4 * 256 * 64 * 4
    assert with_bias - without >= staging + semaphores + 4000 * 4 - h, (with_bias, without, staging)


R = Results()
R.run("a LayerNorm decomposed at opset 17 is the model's arithmetic, run op by op", layer_norm_written_in_python)
R.run("nn.Linear's bias gradient is summed after the matmul gradients of its node",
      linear_bias_summed_after_its_matmul_gradients)
sys.exit(R.finish())
