#!/usr/bin/env python3
"""Shape inference against an independent reference: ONNX Runtime's symbolic shape inference.

For every sample model, the symbolic dims of the graph inputs are made concrete (batch=32, seq=128),
ORT's SymbolicShapeInference infers every intermediate tensor, and each tensor ORT resolves to concrete
dims must have the same dtype and shape in `memplan analyze MODEL --json --shapes`. Exit 77 when
onnxruntime (or the built memplan) is missing.
"""
import argparse
import json
import os
import subprocess
import sys

DIMS = {"batch": 32, "seq": 128}
ONNX_DTYPE = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
              9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}


def ort_shapes(path):
    """tensor name -> (dtype name, shape) for every tensor ORT resolves to concrete dims."""
    import onnx
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    model = onnx.load(path, load_external_data=False)
    g = model.graph
    for vi in g.input:
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param in DIMS:
                v = DIMS[d.dim_param]
                d.ClearField("dim_param")
                d.dim_value = v
    # Weights whose bytes are not shipped become graph inputs of known shape: ORT never needs their values.
    external = [t for t in g.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    for t in external:
        g.initializer.remove(t)
        if not any(i.name == t.name for i in g.input):
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    out = SymbolicShapeInference.infer_shapes(model, auto_merge=False, guess_output_rank=False)
    result, unresolved = {}, 0
    for vi in list(out.graph.value_info) + list(out.graph.output):
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
            unresolved += 1
            continue
        result[vi.name] = (ONNX_DTYPE.get(tt.elem_type, str(tt.elem_type)), [d.dim_value for d in tt.shape.dim])
    return result, unresolved


def model_dims(path):
    """The symbolic dims of the model's graph inputs: --dim may name only those."""
    import onnx

    g = onnx.load(path, load_external_data=False).graph
    return {d.dim_param for vi in g.input for d in vi.type.tensor_type.shape.dim if d.dim_param}


def memplan_shapes(memplan, path):
    cmd = [memplan, "analyze", path, "--json", "--shapes"]
    present = model_dims(path)
    for k, v in DIMS.items():
        if k in present:
            cmd += ["--dim", f"{k}={v}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    doc = json.loads(proc.stdout)
    return {name: (v["dtype"], list(v["shape"])) for name, v in doc["tensor_shapes"].items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=True)
    args = ap.parse_args()
    try:
        import onnx  # noqa: F401
        import onnxruntime.tools.symbolic_shape_infer  # noqa: F401
    except ImportError as e:
        print(f"skip: {e}")
        return 77
    if not os.path.exists(args.memplan):
        print(f"skip: {args.memplan} is not built")
        return 77
    folder = os.path.join(args.samples, "models")
    mismatches, compared = [], 0
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".onnx"):
            continue
        path = os.path.join(folder, name)
        ref, unresolved = ort_shapes(path)
        ours = memplan_shapes(args.memplan, path)
        both = [t for t in ref if t in ours]
        for t in both:
            if ref[t] != ours[t]:
                mismatches.append(f"{name}: {t}: ORT {ref[t][0]} {ref[t][1]}, memplan {ours[t][0]} {ours[t][1]}")
        # Tensors only ORT lists are the ones memplan folded into constants and dropped.
        print(f"{name}: {len(both)} tensors compared ({len(ref) - len(both)} folded away by memplan, "
              f"{unresolved} left symbolic by ORT)")
        compared += len(both)
        if not both:
            mismatches.append(f"{name}: no tensor in common with ORT")
    if mismatches:
        print(f"{len(mismatches)} mismatches:")
        for m in mismatches:
            print("  " + m)
        return 1
    print(f"ok: {compared} tensors agree with ONNX Runtime's symbolic shape inference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
