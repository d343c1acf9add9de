# CPU kernels op by op: small ONNX models through `memplan run` (planned and unshared) against ONNX Runtime.
import argparse
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

rng = np.random.default_rng(1234)
F = TensorProto.FLOAT


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def rand(*shape):
    return rng.uniform(-1, 1, size=shape).astype(np.float32)


def case(name, nodes, x_shape, y_shape=None, inits=(), y_type=F):
    """One float input x, one output y (shape left to inference when None)."""
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", F, list(x_shape))],
                          [helper.make_tensor_value_info("y", y_type, y_shape)], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return name, m, rand(*x_shape)


def n(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, name=f"{op}_{outs[0]}", **attrs)


def cases():
    i64 = lambda v: np.array(v, dtype=np.int64)
    yield case("conv_group_pad_stride", [n("Conv", ["x", "w", "b"], ["y"], group=2, pads=[1, 2, 1, 0], strides=[2, 1],
                                            dilations=[1, 2])], [2, 4, 9, 8], inits=[init("w", rand(6, 2, 3, 3)), init("b", rand(6))])
    yield case("conv1d_same", [n("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2])], [1, 3, 11],
               inits=[init("w", rand(5, 3, 4))])
    yield case("avgpool_pad", [n("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2],
                                 count_include_pad=0)], [1, 2, 7, 7])
    yield case("avgpool_incl_ceil", [n("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2],
                                       count_include_pad=1, ceil_mode=1)], [1, 2, 8, 8])
    yield case("maxpool_ceil", [n("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)], [1, 3, 7, 7])
    yield case("global_pools", [n("GlobalAveragePool", ["x"], ["a"]), n("GlobalMaxPool", ["x"], ["m"]),
                                n("Add", ["a", "m"], ["y"])], [2, 3, 5, 5])
    yield case("batchnorm_relu6", [n("BatchNormalization", ["x", "s", "b", "m", "v"], ["t"], epsilon=1e-3),
                                   n("Clip", ["t", "lo", "hi"], ["y"])], [2, 3, 4, 4],
               inits=[init("s", rand(3)), init("b", rand(3)), init("m", rand(3)), init("v", np.abs(rand(3)) + 0.5),
                      init("lo", np.array(0, np.float32)), init("hi", np.array(6, np.float32))])
    yield case("unary_mix", [n("Sigmoid", ["x"], ["a"]), n("Tanh", ["a"], ["b"]), n("Exp", ["b"], ["c"]), n("Log", ["c"], ["d"]),
                             n("LeakyRelu", ["d"], ["e"], alpha=0.3), n("Abs", ["e"], ["f"]), n("Neg", ["f"], ["g"]),
                             n("HardSwish", ["g"], ["h"]), n("Softplus", ["h"], ["y"])], [3, 17])
    yield case("broadcast_binary", [n("Sub", ["x", "r"], ["a"]), n("Div", ["a", "c"], ["b"]), n("Pow", ["b", "two"], ["p"]),
                                    n("Max", ["p", "x"], ["q"]), n("Min", ["q", "c"], ["y"])], [2, 3, 4],
               inits=[init("r", rand(4)), init("c", np.abs(rand(3, 1)) + 0.5), init("two", np.array(2, np.float32))])
    yield case("where_compare", [n("Greater", ["x", "z"], ["m"]), n("Where", ["m", "x", "k"], ["y"])], [4, 5],
               inits=[init("z", np.array([0.1], np.float32)), init("k", rand(5))])
    yield case("cast_roundtrip", [n("Mul", ["x", "ten"], ["a"]), n("Cast", ["a"], ["i"], to=TensorProto.INT64),
                                  n("Cast", ["i"], ["y"], to=F)], [3, 4], inits=[init("ten", np.array(10, np.float32))])
    yield case("transpose_reshape_flatten", [n("Transpose", ["x"], ["t"], perm=[2, 0, 3, 1]),
                                             n("Reshape", ["t", "s"], ["r"]), n("Flatten", ["r"], ["y"], axis=2)],
               [2, 3, 4, 5], inits=[init("s", i64([4, -1, 5, 1]))])
    yield case("slice_steps", [n("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], [6, 7, 8],
               inits=[init("st", i64([1, -1, 0])), init("en", i64([6, 0, 100])), init("ax", i64([0, 1, 2])), init("sp", i64([2, -2, 3]))])
    yield case("gather_axis1", [n("Gather", ["x", "idx"], ["y"], axis=1)], [3, 5, 2], inits=[init("idx", i64([[4, 0], [-1, 2]]))])
    yield case("concat_split", [n("Split", ["x", "sz"], ["a", "b"], axis=1), n("Relu", ["b"], ["rb"]),
                                n("Concat", ["rb", "a", "x"], ["y"], axis=1)], [2, 5, 3], inits=[init("sz", i64([2, 3]))])
    yield case("expand_tile_unsq_sq", [n("Unsqueeze", ["x", "ax0"], ["u"]), n("Expand", ["u", "sh"], ["e"]),
                                       n("Tile", ["e", "rep"], ["t"]), n("Squeeze", ["t", "ax0"], ["y"])], [3, 1, 4],
               inits=[init("ax0", i64([0])), init("sh", i64([1, 3, 2, 4])), init("rep", i64([1, 1, 2, 2]))])
    yield case("reductions", [n("ReduceSum", ["x", "a1"], ["s"], keepdims=1), n("ReduceMax", ["x"], ["m"], axes=[1], keepdims=1),
                              n("ReduceMean", ["x"], ["mm"], axes=[0, 2], keepdims=1), n("Add", ["s", "m"], ["t"]),
                              n("Add", ["t", "mm"], ["y"])], [3, 4, 5], inits=[init("a1", i64([1]))])
    yield case("softmax_logsoftmax", [n("Softmax", ["x"], ["s"], axis=1), n("LogSoftmax", ["s"], ["y"], axis=-1)], [2, 3, 4])
    yield case("layernorm_axis", [n("LayerNormalization", ["x", "g", "b"], ["y"], axis=-2, epsilon=1e-5)], [2, 3, 4],
               inits=[init("g", rand(3, 4)), init("b", rand(3, 4))])
    yield case("matmul_batch_broadcast", [n("MatMul", ["x", "w"], ["y"])], [2, 1, 3, 5], inits=[init("w", rand(4, 5, 6))])
    yield case("gemm_trans", [n("Gemm", ["x", "w", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)], [7, 3],
               inits=[init("w", rand(4, 7)), init("c", rand(4))])
    yield case("cumsum_axes", [n("CumSum", ["x", "a1"], ["c"]), n("CumSum", ["c", "am1"], ["y"], exclusive=1, reverse=1)],
               [2, 5, 3], inits=[init("a1", np.array(1, dtype=np.int64)), init("am1", np.array(-1, dtype=np.int32))])
    yield case("dropout_identity_sqrt", [n("Dropout", ["x"], ["d"]), n("Identity", ["d"], ["i"]), n("Abs", ["i"], ["a"]),
                                         n("Sqrt", ["a"], ["y"])], [4, 4])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=True)
    a = ap.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, m, x in cases():
            path, xin = os.path.join(tmp, name + ".onnx"), os.path.join(tmp, name + ".x.npy")
            onnx.save(m, path)
            np.save(xin, x)
            want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            got = {}
            for mode in ["planned", "unshared"]:
                out = os.path.join(tmp, f"{name}.{mode}.npy")
                cmd = [a.memplan, "run", path, "--input", xin, "--output", out] + (["--unshared"] if mode == "unshared" else [])
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                got[mode] = np.load(out) if r.returncode == 0 else r.stderr.strip()
            if isinstance(got["planned"], str):
                print(f"{name:28s} FAIL: {got['planned']}")
                failures += 1
                continue
            p = got["planned"]
            diff = float(np.max(np.abs(p.astype(np.float64) - want))) if want.size else 0.0
            same = not isinstance(got["unshared"], str) and p.tobytes() == got["unshared"].tobytes()
            ok = p.shape == want.shape and diff <= 1e-4 and same
            print(f"{name:28s} {str(p.shape):16s} max diff {diff:.3g} planned==unshared {same} {'ok' if ok else 'FAIL'}")
            failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
