#!/usr/bin/env python3
"""Writes a GPT-like ONNX graph (pre-norm transformer blocks, the op pattern of samples/models/tiny_gpt.onnx)
whose weights are external-data references only: memplan plans from dims and the CUDA bench synthesizes
the values. bench/torch_train.py builds the same network in PyTorch.

usage: make_gpt.py OUT.onnx [--layers 8] [--d 512] [--heads 8] [--seq 256] [--batch 16] [--out-dim 512]
"""
import argparse

import onnx
from onnx import TensorProto, helper

from onnx_graph import OnnxGraph


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--out-dim", type=int, default=512)
    a = ap.parse_args()
    B, T, D, H, L = a.batch, a.seq, a.d, a.heads, a.layers
    dh = D // H
    g = OnnxGraph("gpt.weights")
    nodes, inits, weight, const, node = g.nodes, g.inits, g.weight, g.const, g.node

    def linear(x, name, din, dout):
        return node("Add", [weight(name + ".bias", [dout]), node("MatMul", [x, weight(name + ".weight", [din, dout])])])

    split = const("split3", TensorProto.INT64, [3], [D, D, D])
    heads_shape = const("heads_shape", TensorProto.INT64, [4], [B, T, H, dh])
    merged_shape = const("merged_shape", TensorProto.INT64, [3], [B, T, D])
    scale = const("attn_scale", TensorProto.FLOAT, [], [float(dh) ** 0.5])
    sqrt2 = const("sqrt2", TensorProto.FLOAT, [], [2.0 ** 0.5])
    one = const("one", TensorProto.FLOAT, [], [1.0])
    half = const("half", TensorProto.FLOAT, [], [0.5])
    x = "input"
    for i in range(L):
        p = f"blocks.{i}"
        h = node("LayerNormalization", [x, weight(p + ".ln1.weight", [D]), weight(p + ".ln1.bias", [D])], axis=-1, epsilon=1e-5)
        q, k, v = node("Split", [linear(h, p + ".qkv", D, 3 * D), split], [f"{p}.q", f"{p}.k", f"{p}.v"], axis=-1)
        q = node("Transpose", [node("Reshape", [q, heads_shape])], perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [k, heads_shape])], perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [v, heads_shape])], perm=[0, 2, 1, 3])
        att = node("Softmax", [node("Div", [node("MatMul", [q, k]), scale])], axis=-1)
        o = node("Reshape", [node("Transpose", [node("MatMul", [att, v])], perm=[0, 2, 1, 3]), merged_shape])
        x = node("Add", [x, linear(o, p + ".proj", D, D)])
        h = node("LayerNormalization", [x, weight(p + ".ln2.weight", [D]), weight(p + ".ln2.bias", [D])], axis=-1, epsilon=1e-5)
        f = linear(h, p + ".fc1", D, 4 * D)
        gelu = node("Mul", [node("Mul", [f, node("Add", [node("Erf", [node("Div", [f, sqrt2])]), one])]), half])
        x = node("Add", [x, linear(gelu, p + ".fc2", 4 * D, D)])
    h = node("LayerNormalization", [x, weight("ln.weight", [D]), weight("ln.bias", [D])], axis=-1, epsilon=1e-5)
    node("MatMul", [h, weight("head.weight", [D, a.out_dim])], ["output"])
    graph = helper.make_graph(nodes, f"gpt_l{L}_d{D}_t{T}_b{B}", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [B, T, D])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [B, T, a.out_dim])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="memplan bench/make_gpt.py")
    model.ir_version = 8  # what opset 17 needs; memplan reads IR versions up to 11
    onnx.save(model, a.out)


if __name__ == "__main__":
    main()
