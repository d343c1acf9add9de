#!/usr/bin/env python3
"""Training through ops of PyTorch's ONNX exports that had no backward: InstanceNormalization (GroupNorm as the
TorchScript exporter writes it: Reshape, InstanceNormalization with a ones scale, Reshape, Mul, Add, which memplan reads
as one GroupNormalization whose weight and bias train; other InstanceNormalizations as they are), GroupNormalization
(opsets 18 and 21), Pad in every mode with crops (negative pads), Resize in cubic mode, Transpose with perm entries
counted from the end. The forward pass that `memplan run` computes equals ONNX Runtime's, and the first weight
gradients of `memplan train --loss none` equal central finite differences of the loss that ONNX Runtime computes; in
bf16 (the op's forward itself in bf16, between Casts, and under --precision bf16 autocast) and under fp16 autocast they
equal float32's within 16-bit tolerance. NonZero (longformer's position ids): exact when its input is known at planning
time, else planned at its upper bound with a warning naming it, and a run whose data has another count refused with a
clear error. Exit 77 when the command, onnx, onnxruntime or numpy is missing."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from viz_testlib import check, cli_args, failures

A = cli_args()
if A is None:
    sys.exit(77)
try:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError:
    print("skip: onnx, onnxruntime or numpy missing")
    sys.exit(77)

N, C, H, W, G = 2, 4, 5, 6, 2
RNG = np.random.RandomState(7)
X = RNG.randn(N, 3, H, W).astype(np.float32)
R = np.cos(np.arange(N * C * H * W)).astype(np.float32).reshape(N, C, H, W)


def const(name, v):
    v = np.asarray(v)
    return helper.make_node("Constant", [], [name], name=name + "_const", value=numpy_helper.from_array(v, name + "_value"))


def cast(src, dst, to):
    return helper.make_node("Cast", [src], [dst], to=to)


# The weights of each case (name -> value); the loss is sum(body(Conv1x1(x, w)) * R). A weight trains in a parameter
# slot (Conv's, InstanceNormalization's); gw and gb are read by Mul and Add and stay constants.
def norm_weights():
    return {"w": (RNG.randn(C, 3, 1, 1) * 0.5).astype(np.float32), "scale": RNG.randn(C).astype(np.float32),
            "bias": RNG.randn(C).astype(np.float32), "gw": RNG.randn(1, C, 1, 1).astype(np.float32),
            "gb": RNG.randn(C, 1, 1).astype(np.float32)}


def instance_norm_body(low):
    """h -> InstanceNormalization (per channel, scale and bias) -> GroupNorm as exported -> out. `low`: the first
    InstanceNormalization runs in bf16 between Casts."""
    bf = TensorProto.BFLOAT16
    nodes = [const("ones", np.ones(G, np.float32)), const("zeros", np.zeros(G, np.float32)),
             const("gshape", np.array([N, G, -1], np.int64)), const("xshape", np.array([N, C, H, W], np.int64))]
    if low:
        # X in bf16 beside float32 scale and bias (as the CUDA kernel takes them; ORT does not run this model)
        nodes += [cast("h", "h16", bf), helper.make_node("InstanceNormalization", ["h16", "scale", "bias"], ["n16"], epsilon=1e-5),
                  cast("n16", "n", TensorProto.FLOAT)]
    else:
        nodes.append(helper.make_node("InstanceNormalization", ["h", "scale", "bias"], ["n"], epsilon=1e-5))
    nodes += [helper.make_node("Reshape", ["n", "gshape"], ["ng"]),
              helper.make_node("InstanceNormalization", ["ng", "ones", "zeros"], ["gn"], epsilon=1e-5),
              helper.make_node("Reshape", ["gn", "xshape"], ["g4"]), helper.make_node("Mul", ["g4", "gw"], ["gm"]),
              helper.make_node("Add", ["gm", "gb"], ["out"])]
    return nodes


def group_norm_weights(params):
    return {"w": (RNG.randn(C, 3, 1, 1) * 0.5).astype(np.float32), "gscale": RNG.randn(params).astype(np.float32),
            "gbias": RNG.randn(params).astype(np.float32)}


def group_norm_body(low):
    """h -> GroupNormalization (2 groups of 2 channels) -> out; `low`: X in bf16 between Casts."""
    if not low:
        return [helper.make_node("GroupNormalization", ["h", "gscale", "gbias"], ["out"], num_groups=2, epsilon=1e-5)]
    return [cast("h", "h16", TensorProto.BFLOAT16),
            helper.make_node("GroupNormalization", ["h16", "gscale", "gbias"], ["n16"], num_groups=2, epsilon=1e-5),
            cast("n16", "out", TensorProto.FLOAT)]


def exported_group_norm_weights():
    return {"w": (RNG.randn(C, 3, 1, 1) * 0.5).astype(np.float32), "gw": RNG.randn(C).astype(np.float32),
            "gb": RNG.randn(C).astype(np.float32)}


def exported_group_norm_body():
    """torch.onnx's group_norm symbolic, node for node: Reshape(h, [0, G, -1]) -> InstanceNormalization(ones, zeros) ->
    Reshape(Shape(h)) -> Mul(Unsqueeze(weight)) -> Add(Unsqueeze(bias)); memplan reads it as one GroupNormalization.
    (bf16 under autocast only: the pattern is float32 until autocast casts it.)"""
    src = "h"
    nodes = [const("gshape", np.array([0, G, -1], np.int64)), const("ones", np.ones(G, np.float32)),
              const("zeros", np.zeros(G, np.float32)), const("axes", np.array([1, 2], np.int64)),
              helper.make_node("Reshape", [src, "gshape"], ["hg"]),
              helper.make_node("InstanceNormalization", ["hg", "ones", "zeros"], ["ng"], epsilon=1e-5),
              helper.make_node("Shape", [src], ["hshape"]), helper.make_node("Reshape", ["ng", "hshape"], ["n4"]),
              helper.make_node("Unsqueeze", ["gw", "axes"], ["gwu"]), helper.make_node("Unsqueeze", ["gb", "axes"], ["gbu"]),
              helper.make_node("Mul", ["n4", "gwu"], ["gm"]), helper.make_node("Add", ["gm", "gbu"], ["out"])]
    return nodes


def planned_op_types(d, name, model):
    path, saved = os.path.join(d, name + "_types.onnx"), os.path.join(d, name + "_plan.json")
    onnx.save(model, path)
    r = subprocess.run([A.memplan, "plan", path, "--train", "--loss", "none", "--save-plan", saved], capture_output=True,
                       text=True, timeout=120)
    if not check(r.returncode == 0, f"{name}: plan exit {r.returncode} {r.stderr.strip()[-300:]}"):
        return set()
    with open(saved) as f:
        return {op["type"] for op in json.load(f)["graph"]["ops"]}


def pad_weights():
    return {"w": (RNG.randn(C, 3, 1, 1) * 0.5).astype(np.float32)}


def pad_body(mode, pads, low):
    """h -> Pad(mode, pads) -> Tanh -> Pad back to h's shape (constant, the inverse pads' sizes) -> out."""
    bf = TensorProto.BFLOAT16
    grown = [H + pads[2] + pads[6], W + pads[3] + pads[7]]
    back = [0, 0, 0, 0, 0, 0, H - grown[0], W - grown[1]]
    nodes = [const("pads", np.array(pads, np.int64)), const("back", np.array(back, np.int64))]
    src = "h"
    if low:
        nodes.append(cast("h", "h16", bf))
        src = "h16"
    nodes += [helper.make_node("Pad", [src, "pads"], ["padded"], mode=mode), helper.make_node("Tanh", ["padded"], ["t"])]
    if low:
        nodes += [cast("t", "t32", TensorProto.FLOAT)]
    nodes.append(helper.make_node("Pad", ["t32" if low else "t", "back"], ["out"]))
    return nodes


def loss_model(weights, body, with_input, opset=18):
    """loss = sum(out * R) over a 1x1 Conv of x: x a graph input (`memplan run` and ORT) or a constant (`train
    --loss none` needs no input, and ORT computes the same loss for finite differences)."""
    nodes = [] if with_input else [const("x", X)]
    nodes += [const("r", R), helper.make_node("Conv", ["x", "w"], ["h"])] + body
    nodes += [helper.make_node("Mul", ["out", "r"], ["weighted"]), helper.make_node("ReduceSum", ["weighted"], ["loss"], keepdims=0)]
    inits = [numpy_helper.from_array(v, k) for k, v in weights.items()]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X.shape))] if with_input else []
    outputs = [helper.make_tensor_value_info("out" if with_input else "loss", TensorProto.FLOAT, None)]
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10 if opset >= 21 else 8)


def ort_run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def forward_case(d, name, weights, body, ort_body=None, opset=18):
    """`ort_body`: the same computation spelled as ONNX Runtime accepts it, when `body` is not."""
    model = loss_model(weights, body, True, opset)
    path, xin, yout = (os.path.join(d, f"{name}_fwd.{e}") for e in ("onnx", "x.npy", "y.npy"))
    onnx.save(model, path)
    np.save(xin, X)
    r = subprocess.run([A.memplan, "run", path, "--input", xin, "--output", yout], capture_output=True, text=True, timeout=120)
    if not check(r.returncode == 0, f"{name}: run exit {r.returncode} {r.stderr.strip()[-300:]}"):
        return
    got, want = np.load(yout), ort_run(loss_model(weights, ort_body or body, True, opset), {"x": X})
    diff = float(np.max(np.abs(got - want)))
    check(got.shape == want.shape and diff <= 1e-4, f"{name}: forward differs from onnxruntime's by {diff:.3g}")
    print(f"{name}: forward within {diff:.2g} of onnxruntime's")


def train_grads(d, name, model, precision="fp32"):
    path, out = os.path.join(d, f"{name}_{precision}.onnx"), os.path.join(d, f"{name}_{precision}_grads")
    onnx.save(model, path)
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run([A.memplan, "train", path, "--loss", "none", "--steps", "1", "--lr", "0", "--precision", precision,
                        "--save-grads", out], capture_output=True, text=True, timeout=300)
    if not check(r.returncode == 0, f"{name} {precision}: train exit {r.returncode} {r.stderr.strip()[-300:]}"):
        return None
    return [np.load(os.path.join(out, f)).astype(np.float64) for f in sorted(os.listdir(out), key=lambda f: int(f[5:-4]))]


def by_shape(grads, weights, trained):
    """The gradients of the `trained` weights: those of one shape in the weights' order (grad_K follows it)."""
    out = {}
    for k in trained:
        same = [j for j in trained if weights[j].shape == weights[k].shape]
        hits = [g for g in grads if g.shape == weights[k].shape]
        if check(len(hits) == len(same), f"{k}: {len(hits)} gradients of shape {weights[k].shape}, {len(same)} expected"):
            out[k] = hits[same.index(k)]
    return out


def finite_differences(trained, weights, body, opset, step=1e-2):
    fd = {}
    for k, v in trained.items():
        g = np.zeros(v.shape)
        for i in np.ndindex(v.shape):
            lo, hi = dict(weights), dict(weights)
            lo[k], hi[k] = v.copy(), v.copy()
            lo[k][i] -= step
            hi[k][i] += step
            g[i] = (float(ort_run(loss_model(hi, body, False, opset), {})) -
                    float(ort_run(loss_model(lo, body, False, opset), {}))) / (2 * step)
        fd[k] = g
    return fd


def relative(a, b):
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-12))


def gradient_case(d, name, weights, trained, body, low_body, ort_body=None, opset=18, fd_tol=2e-3, low_tol=0.05):
    ref = train_grads(d, name, loss_model(weights, body, False, opset))
    if ref is None:
        return
    ref = by_shape(ref, weights, trained)
    fd = finite_differences({k: weights[k] for k in trained}, weights, ort_body or body, opset)
    worst = {"fd": 0.0, "bf16 op": 0.0, "autocast": 0.0, "fp16 autocast": 0.0}
    for k in ref:
        err = relative(ref[k], fd[k])
        worst["fd"] = max(worst["fd"], err)
        check(err <= fd_tol, f"{name}: d{k} differs from finite differences by {err:.3g} of its largest (tolerance {fd_tol})")
    # bf16: the op's own forward and backward in bf16 (Casts around it), and the whole step under bf16 autocast.
    low = [("bf16 op", loss_model(weights, low_body, False, opset), "fp32")] if low_body else []
    for label, model, precision in low + [("autocast", loss_model(weights, body, False, opset), "bf16"),
                                          ("fp16 autocast", loss_model(weights, body, False, opset), "fp16")]:
        got = train_grads(d, f"{name}_{label.replace(' ', '_')}", model, precision)
        if got is None:
            continue
        got = by_shape(got, weights, trained)
        for k in ref:
            if k in got:
                err = relative(got[k], ref[k])
                worst[label] = max(worst[label], err)
                tol = low_tol / 5 if precision == "fp16" else low_tol  # 10 mantissa bits against bf16's 7
                check(err <= tol, f"{name} {label}: d{k} differs from float32's by {err:.3g} (tolerance {tol})")
    print(f"{name}: {len(ref)} gradients; largest relative difference from finite differences {worst['fd']:.2g}, "
          f"bf16 op from float32 {worst['bf16 op']:.2g}, bf16 autocast {worst['autocast']:.2g}, "
          f"fp16 autocast {worst['fp16 autocast']:.2g}")


def resize_body(attrs, low):
    """h -> Resize (cubic) to [7, 9] -> Tanh -> Resize (cubic) back to [H, W] -> out."""
    src, nodes = "h", [const("empty", np.zeros(0, np.float32)), const("up", np.array([N, C, 7, 9], np.int64)),
                       const("down", np.array([N, C, H, W], np.int64))]
    if low:
        nodes.append(cast("h", "h16", TensorProto.BFLOAT16))
        src = "h16"
    nodes += [helper.make_node("Resize", [src, "empty", "empty", "up"], ["ru"], mode="cubic", **attrs),
              helper.make_node("Tanh", ["ru"], ["rt"]),
              helper.make_node("Resize", ["rt", "empty", "empty", "down"], ["rd"], mode="cubic", **attrs)]
    nodes.append(cast("rd", "out", TensorProto.FLOAT) if low else helper.make_node("Identity", ["rd"], ["out"]))
    return nodes


def transpose_body(perm, low):
    """h -> Transpose(perm) -> Tanh -> Transpose back -> out."""
    rank = 4
    p = [q % rank for q in perm]
    back = [p.index(k) for k in range(rank)]
    src, nodes = "h", []
    if low:
        nodes.append(cast("h", "h16", TensorProto.BFLOAT16))
        src = "h16"
    nodes += [helper.make_node("Transpose", [src], ["tp"], perm=perm), helper.make_node("Tanh", ["tp"], ["th"]),
              helper.make_node("Transpose", ["th"], ["tb"], perm=back)]
    nodes.append(cast("tb", "out", TensorProto.FLOAT) if low else helper.make_node("Identity", ["tb"], ["out"]))
    return nodes


def non_zero_cases(d):
    """NonZero of a graph input (upper bound, warned) and of ConstantOfShape (exact, folded), each feeding a Gather of
    a trained weight and then the loss of a training step."""
    cos = helper.make_node("ConstantOfShape", ["shp"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.int64), "v"))
    for name, known in (("non_zero_input", False), ("non_zero_constant", True)):
        src = "ones" if known else "m"
        nodes = [const("shp", np.array([6], np.int64)), cos,
                 helper.make_node("NonZero", [src], ["nz"]), helper.make_node("Squeeze", ["nz", "zero"], ["ids"]),
                 const("zero", np.array([0], np.int64)), helper.make_node("Gather", ["w", "ids"], ["rows"], axis=0),
                 helper.make_node("ReduceSum", ["rows"], ["out"], keepdims=0)]
        g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("m", TensorProto.FLOAT, [6])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [])],
                              [numpy_helper.from_array(RNG.randn(6, 3).astype(np.float32), "w")])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        path = os.path.join(d, name + ".onnx")
        onnx.save(model, path)
        r = subprocess.run([A.memplan, "plan", path, "--train", "--loss", "none"], capture_output=True, text=True, timeout=120)
        warned = "NonZero" in r.stderr and "upper bound" in r.stderr
        check(r.returncode == 0, f"{name}: plan --train exit {r.returncode} {r.stderr.strip()[-300:]}")
        check(warned != known, f"{name}: a warning naming NonZero's upper bound {'given' if known else 'missing'}: {r.stderr.strip()[-300:]}")
        m = np.array([1.5, -2.0, 0.5, 3.0, 1.0, -1.0], np.float32)
        for label, data, ok in (("all nonzero", m, True), ("two zeros", m * np.array([1, 0, 1, 1, 0, 1], np.float32), known)):
            xin, yout = os.path.join(d, name + "_m.npy"), os.path.join(d, name + "_y.npy")
            np.save(xin, data)
            r = subprocess.run([A.memplan, "run", path, "--input", xin, "--output", yout], capture_output=True, text=True, timeout=120)
            if ok:
                want = ort_run(model, {"m": data})
                check(r.returncode == 0 and abs(float(np.load(yout)) - float(want)) <= 1e-5,
                      f"{name} {label}: run exit {r.returncode}, against onnxruntime's {float(want)} {r.stderr.strip()[-200:]}")
            else:
                check(r.returncode == 5 and "NonZero" in r.stderr and "nonzero elements" in r.stderr,
                      f"{name} {label}: exit {r.returncode}, expected 5 naming NonZero's count: {r.stderr.strip()[-300:]}")
        print(f"{name}: planned {'exactly' if known else 'at its upper bound, warned'}; runs checked")


PAD_CASES = {
    "reflect": [0, 0, 2, 3, 0, 0, 1, 2],
    "edge": [0, 0, 3, 1, 0, 0, 2, 4],
    "wrap": [0, 0, 1, 2, 0, 0, 3, 2],
    "constant": [0, 0, -1, 2, 0, 0, 1, -2],  # crops (rwkv's time shift: one step in, the last one out)
    "reflect_crop": [0, 0, -2, 1, 0, 0, 2, -1],
}

with tempfile.TemporaryDirectory() as d:
    nw = norm_weights()
    forward_case(d, "instance_norm", nw, instance_norm_body(False))
    gradient_case(d, "instance_norm", nw, ["w", "scale", "bias"], instance_norm_body(False), instance_norm_body(True))
    # GroupNorm exported by torch.onnx (opset 17): one GroupNormalization in the step, its weight and bias trained.
    ew = exported_group_norm_weights()
    types = planned_op_types(d, "exported_group_norm", loss_model(ew, exported_group_norm_body(), False, 17))
    check({"GroupNormalization", "GroupNormGrad"} <= types and "InstanceNormalization" not in types,
          f"exported_group_norm: the step's ops {sorted(types)} hold no single GroupNormalization")
    forward_case(d, "exported_group_norm", ew, exported_group_norm_body(), opset=17)
    gradient_case(d, "exported_group_norm", ew, ["w", "gw", "gb"], exported_group_norm_body(), None, opset=17)
    # GroupNormalization: scale and bias per channel (opset 21) and per group (opset 18).
    for opset, params in ((21, C), (18, G)):
        gw = group_norm_weights(params)
        forward_case(d, f"group_norm_{opset}", gw, group_norm_body(False), opset=opset)
        gradient_case(d, f"group_norm_{opset}", gw, ["w", "gscale", "gbias"], group_norm_body(False), group_norm_body(True),
                      opset=opset)
    for name, pads in PAD_CASES.items():
        mode = name.split("_")[0]
        pw = pad_weights()
        forward_case(d, f"pad_{name}", pw, pad_body(mode, pads, False))
        gradient_case(d, f"pad_{name}", pw, ["w"], pad_body(mode, pads, False), pad_body(mode, pads, True))
    # dinov2's position embeddings: PyTorch's bicubic (half_pixel, A = -0.75); exclude_outside with another A.
    for name, attrs in (("resize_cubic", {"coordinate_transformation_mode": "half_pixel", "cubic_coeff_a": -0.75}),
                        ("resize_cubic_exclude_outside", {"coordinate_transformation_mode": "align_corners",
                                                          "cubic_coeff_a": -0.5, "exclude_outside": 1})):
        rw = pad_weights()
        forward_case(d, name, rw, resize_body(attrs, False))
        gradient_case(d, name, rw, ["w"], resize_body(attrs, False), resize_body(attrs, True))
    non_zero_cases(d)
    # nemotron_h's mixer: perm [0, -2, -1, 1] (ONNX Runtime reads only [0, 2, 3, 1]).
    perm = [0, -2, -1, 1]
    tw = pad_weights()
    forward_case(d, "transpose_negative_perm", tw, transpose_body(perm, False), transpose_body([0, 2, 3, 1], False))
    gradient_case(d, "transpose_negative_perm", tw, ["w"], transpose_body(perm, False), transpose_body(perm, True),
                  transpose_body([0, 2, 3, 1], False))
print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
