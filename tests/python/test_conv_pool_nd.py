# Conv, ConvTranspose and the pools in 1-D, 2-D and 3-D through `memplan run`: ONNX's own backend cases (their
# reference outputs) and random attributes against ONNX Runtime (CPU), rtol 1e-3, atol 1e-4.
import argparse
import glob
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper, version_converter
    from onnx.reference import ReferenceEvaluator
except ImportError:
    print("skip: numpy, onnx or onnxruntime is not installed")
    sys.exit(77)

WINDOWED = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool",
            "GlobalLpPool"}
# Ops a backend case may hold beside the windowed ones (the 1-D pools are exported between Unsqueeze and Squeeze).
PLUMBING = {"Unsqueeze", "Squeeze", "Reshape", "Identity"}
OPSET = 19  # the random models' opset (AveragePool's dilations)


def run_memplan(memplan, model, inputs, tmp, n_out):
    cmd = [memplan, "run", model]
    for k, x in enumerate(inputs):
        path = os.path.join(tmp, f"in{k}.npy")
        np.save(path, x)
        cmd += ["--input", path]
    outs = [os.path.join(tmp, f"out{k}.npy") for k in range(n_out)]
    for o in outs:
        cmd += ["--output", o]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return None, f"exit {r.returncode}: {r.stderr.strip()[:300]}"
    return [np.load(o) for o in outs], ""


def close(got, want):
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if got.dtype.kind in "iu":
        return "" if np.array_equal(got, want) else "indices differ"
    err = np.abs(got.astype(np.float64) - want.astype(np.float64)) - (1e-4 + 1e-3 * np.abs(want.astype(np.float64)))
    return "" if want.size == 0 or err.max() <= 0 else f"max excess {err.max():.3g}"


def backend_cases():
    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    for suite in ("simple", "pytorch-operator", "pytorch-converted"):
        for case in sorted(glob.glob(os.path.join(root, suite, "*", "model.onnx"))):
            m = onnx.load(case)
            ops = {n.op_type for n in m.graph.node}
            if ops & WINDOWED and ops <= WINDOWED | PLUMBING:
                yield suite, os.path.dirname(case), m


def read_pb(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def check_backend(memplan, tmp):
    passed = total = 0
    for suite, folder, m in backend_cases():
        opset = max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=OPSET)
        if opset < 7:  # memplan's importer starts at opset 7: the test converts as ONNX's own converter does
            m = version_converter.convert_version(m, 13)
        path = os.path.join(tmp, "case.onnx")
        onnx.save(m, path)
        for data in sorted(glob.glob(os.path.join(folder, "test_data_set_*"))):
            inputs = [read_pb(p) for p in sorted(glob.glob(os.path.join(data, "input_*.pb")))]
            wants = [read_pb(p) for p in sorted(glob.glob(os.path.join(data, "output_*.pb")))]
            got, why = run_memplan(memplan, path, inputs, tmp, len(wants))
            if got is not None:
                why = "; ".join(w for w in (close(g, x) for g, x in zip(got, wants)) if w)
            total += 1
            passed += not why
            print(f"{suite}/{os.path.basename(folder)}/{os.path.basename(data)}: {'ok' if not why else 'FAIL ' + why}")
    print(f"backend cases: {passed} of {total} pass")
    return total - passed, total


def rand_window(rng, rank, pools):
    """kernel, strides, dilations, pads (begin..., end...) and auto_pad for `rank` spatial axes."""
    k = [int(rng.integers(1, 4)) for _ in range(rank)]
    s = [int(rng.integers(1, 3)) for _ in range(rank)]
    d = [int(rng.integers(1, 3)) for _ in range(rank)]
    auto_pad = str(rng.choice(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    pads = [int(rng.integers(0, k[i % rank] if pools else 3)) for i in range(2 * rank)]
    return k, s, d, pads, auto_pad


def window_attrs(k, s, d, pads, auto_pad, dilations=True):
    a = {"kernel_shape": k, "strides": s, "auto_pad": auto_pad}
    if dilations:
        a["dilations"] = d
    if auto_pad == "NOTSET":
        a["pads"] = pads
    return a


def spatial_dims(rng, k, d, pads):
    rank = len(k)
    return [int(rng.integers(max(1, (k[i] - 1) * d[i] + 1 - pads[i] - pads[i + rank]), 6)) for i in range(rank)]


def random_case(rng, kind, rank):
    """(op type, attributes, input arrays, number of outputs)."""
    n = int(rng.integers(1, 3))
    if kind in ("Conv", "ConvTranspose"):
        group = int(rng.choice([1, 2]))
        c, m = group * int(rng.integers(1, 3)), group * int(rng.integers(1, 3))
        k, s, d, pads, auto_pad = rand_window(rng, rank, False)
        a = window_attrs(k, s, d, pads, auto_pad)
        a["group"] = group
        x = rng.standard_normal([n, c] + spatial_dims(rng, k, d, pads if auto_pad == "NOTSET" else [0] * 2 * rank))
        if kind == "ConvTranspose":
            x = rng.standard_normal([n, c] + [int(rng.integers(1, 5)) for _ in range(rank)])
            # ONNX allows output_padding below the stride or the dilation; ONNX Runtime and ONNX's reference only below
            # the stride.
            a["output_padding"] = [int(rng.integers(0, s[i])) for i in range(rank)]
            if auto_pad.startswith("SAME"):  # a SAME output the kernel cannot reach: ill-defined, memplan refuses it
                a["strides"] = [min(s[i], (k[i] - 1) * d[i] + 1 + a["output_padding"][i]) for i in range(rank)]
            w = rng.standard_normal([c, m // group] + k)
        else:
            w = rng.standard_normal([m, c // group] + k)
        ins = [x, w] + ([rng.standard_normal([m if kind == "Conv" else m])] if rng.integers(0, 2) else [])
        return kind, a, [v.astype(np.float32) for v in ins], 1
    if kind.startswith("Global"):
        a = {"p": int(rng.integers(1, 4))} if kind == "GlobalLpPool" else {}
        return kind, a, [rng.standard_normal([n, 2] + [int(rng.integers(1, 5)) for _ in range(rank)]).astype(np.float32)], 1
    k, s, d, pads, auto_pad = rand_window(rng, rank, True)
    if kind == "LpPool" or auto_pad.startswith("SAME"):
        # SAME pools: ONNX Runtime and ONNX's reference pad for the undilated kernel and refuse a kernel below the
        # stride, where ONNX's shape inference follows the spec (memplan does too); those cases are left out.
        d = [1] * rank
        s = [min(s[i], k[i]) for i in range(rank)]
    a = window_attrs(k, s, d, pads, auto_pad, kind != "LpPool")
    if kind != "LpPool" and auto_pad != "SAME_UPPER" and auto_pad != "SAME_LOWER":
        a["ceil_mode"] = int(rng.integers(0, 2))
    outputs = 1
    if kind == "MaxPool" and rng.integers(0, 2):
        outputs, a["storage_order"] = 2, int(rng.integers(0, 2))
    if kind == "AveragePool":
        a["count_include_pad"] = int(rng.integers(0, 2))
    if kind == "LpPool":
        a["p"] = int(rng.integers(1, 4))
    x = rng.standard_normal([n, 2] + spatial_dims(rng, k, d, pads if auto_pad == "NOTSET" else [0] * 2 * rank))
    return kind, a, [x.astype(np.float32)], outputs


def model_of(kind, attrs, inputs, outputs):
    names = [f"x{i}" for i in range(len(inputs))]
    outs = ["y", "indices"][:outputs]
    node = helper.make_node(kind, names, outs, **attrs)
    g = helper.make_graph([node], "case",
                          [helper.make_tensor_value_info(nm, TensorProto.FLOAT, list(v.shape)) for nm, v in zip(names, inputs)],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT if o == "y" else TensorProto.INT64, None) for o in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    return m


def empty_window(y):
    return y.dtype.kind == "f" and bool((~np.isfinite(y) | (y <= -1e38)).any())


def ort_outputs(path, inputs):
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    try:
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        return sess.run(None, {f"x{i}": v for i, v in enumerate(inputs)})
    except Exception:
        return None


def reference_outputs(model, inputs):
    """ONNX's reference implementation: the spec where ONNX Runtime deviates (dilations with SAME padding,
    output_padding below the dilation, AveragePool dilations)."""
    try:
        return ReferenceEvaluator(model).run(None, {f"x{i}": v for i, v in enumerate(inputs)})
    except Exception:
        return None


def check_random(memplan, tmp, per_kind):
    rng = np.random.default_rng(16)
    kinds = ["Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"]
    failures = total = by_reference = 0
    for kind in kinds:
        for rank in (1, 2, 3):
            for _ in range(1 if kind.startswith("Global") else per_kind):  # global pools have no attributes to vary
                op, attrs, inputs, outputs = random_case(rng, kind, rank)
                m = model_of(op, attrs, inputs, outputs)
                path = os.path.join(tmp, "random.onnx")
                onnx.save(m, path)
                wants = ort_outputs(path, inputs)
                got, why = run_memplan(memplan, path, inputs, tmp, outputs)
                if got is not None and wants is not None:
                    why = "; ".join(w for w in (close(g, x) for g, x in zip(got, wants)) if w)
                if got is None and wants is not None and any(empty_window(w) for w in wants):
                    why = ""  # a window over padding alone (-inf, the lowest float or 0/0): memplan refuses it
                elif why or wants is None:  # ONNX Runtime differs from the spec or refuses: ONNX's reference decides
                    refs = reference_outputs(m, inputs)
                    by_reference += refs is not None
                    if refs is None:
                        why = "" if got is None else "accepted what ONNX Runtime and ONNX's reference refuse"
                    elif got is not None:
                        why = "; ".join(w for w in (close(g, x) for g, x in zip(got, refs)) if w)
                total += 1
                if why:
                    failures += 1
                    print(f"random {op} {rank}-D {attrs} {[list(v.shape) for v in inputs]}: FAIL {why}")
    print(f"random cases: {total - failures} of {total} agree ({by_reference} checked against ONNX's reference where ONNX"
          " Runtime refused or differed)")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples")
    ap.add_argument("--per-kind", type=int, default=2, help="random cases per op and spatial rank")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        backend_failures, total = check_backend(a.memplan, tmp)
        random_failures = check_random(a.memplan, tmp, a.per_kind)
    if total == 0:
        print("no backend case found in the onnx wheel")
    return 1 if backend_failures or random_failures else 0


if __name__ == "__main__":
    sys.exit(main())
