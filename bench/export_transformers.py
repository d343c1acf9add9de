#!/usr/bin/env python3
"""Exports the transformer set of bench/transformer_zoo.py to training-mode ONNX graphs for memplan.

For each model: torch.onnx.export through the TorchScript exporter (dynamo=False), opset 17,
training=TrainingMode.TRAINING (Dropout kept, model.train()), do_constant_folding=False, dynamic axes
`batch` (and `seq` for text); the graph is checked with onnx.checker and run by ONNX Runtime at two input
shapes (the dynamic axes really are dynamic), then saved as <name>.train.onnx with every initializer of
1 KiB or more moved to external data, and that data file deleted: only the graph is kept (weights are
random anyway), so each file is small. Optionally also an eval-mode export through the dynamo exporter,
<name>.dynamo.onnx, stripped the same way. Weights are never downloaded: models come from config objects.

Writes DIR/manifest.json (what was exported, input and output names, dynamic axes, parameter counts).

usage: export_transformers.py [--out DIR] [--only NAME,...] [--list] [--attn eager|sdpa] [--opset N]
                              [--dynamo NAME,...|all|none]
"""
import argparse
import collections
import io
import json
import os
import sys
import time
import traceback
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from transformer_zoo import MODELS, TEXT, build, make_input, select  # noqa: E402  (shared with the peaks script)

OPSET = 17
OPSET_USED = [OPSET]  # --opset sets it
SIZE_THRESHOLD = 1024  # bytes: initializers at least this large go to the (deleted) external data file
MAX_FILE_BYTES = 16 << 20
DEFAULT_DYNAMO = "bert_small,gpt2_small,llama_gqa,deit_tiny"
# Export at one shape, then run ONNX Runtime at that shape and another to prove the axes are dynamic.
TEXT_SHAPES = [(2, 32), (3, 48)]
VISION_SHAPES = [(2, 224), (3, 224)]


def io_names(spec):
    name = "input_ids" if spec.family == TEXT else "images"
    axes = {0: "batch", 1: "seq"} if spec.family == TEXT else {0: "batch"}
    return name, axes


def example(spec, shape):
    b, s = shape
    return make_input(spec, b, seq=s) if spec.family == TEXT else make_input(spec, b, image_size=s)


def expected_output_shape(spec, shape, out_shape_at_export, export_shape):
    """The export-time output shape with its batch (and seq) dims moved to `shape`."""
    out = list(out_shape_at_export)
    out[0] = shape[0]
    if spec.family == TEXT and len(out) > 2:
        assert out[1] == export_shape[1]
        out[1] = shape[1]
    return out


def run_ort(spec, model_bytes, shapes, out_shape_at_export):
    """Runs the full (weights included) model in ONNX Runtime on CPU at each shape; checks the output shape."""
    import numpy as np
    try:
        import onnxruntime as ort
    except ImportError:
        return "skipped: onnxruntime is not installed"

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    in_name = sess.get_inputs()[0].name
    checked = []
    for shape in shapes:
        x = example(spec, shape).numpy()
        (y,) = sess.run(None, {in_name: x})
        want = expected_output_shape(spec, shape, out_shape_at_export, shapes[0])
        if list(y.shape) != want:
            raise RuntimeError(f"ONNX Runtime at input {list(x.shape)}: output {list(y.shape)}, expected {want}")
        if not np.isfinite(y).all():
            raise RuntimeError(f"ONNX Runtime at input {list(x.shape)}: non-finite output")
        checked.append(list(x.shape))
    return checked


def strip_and_save(model_proto, path):
    """Saves the graph with every initializer >= SIZE_THRESHOLD bytes as external data, deletes the data file,
    and checks that what is left loads (without external data) and passes onnx.checker."""
    import onnx

    data_name = os.path.basename(path) + ".data"
    data_path = os.path.join(os.path.dirname(path), data_name)
    onnx.save_model(model_proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data_name, size_threshold=SIZE_THRESHOLD)
    if os.path.exists(data_path):
        os.remove(data_path)
    # onnx.checker would look for the deleted data file: check the reloaded graph with zero-filled weights.
    stripped = onnx.load(path, load_external_data=False)
    if len(stripped.graph.node) != len(model_proto.graph.node):
        raise RuntimeError(f"{path}: {len(stripped.graph.node)} nodes after saving, "
                           f"{len(model_proto.graph.node)} before")
    for t in stripped.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            where = {e.key: e.value for e in t.external_data}.get("location")
            if where != data_name:
                raise RuntimeError(f"{path}: initializer {t.name} refers to {where}, expected {data_name}")
    onnx.checker.check_model(with_zero_weights(stripped), full_check=True)
    return stripped


def with_zero_weights(stripped):
    """A copy of a stripped graph whose external initializers hold zeros of their dtype and shape, for the
    checker (or ONNX Runtime) to run on."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    full = onnx.ModelProto()
    full.CopyFrom(stripped)
    for t in full.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            zeros = np.zeros(tuple(t.dims), helper.tensor_dtype_to_np_dtype(t.data_type))
            t.CopyFrom(numpy_helper.from_array(zeros, t.name))
    return full


def histogram(graph):
    return collections.Counter(n.op_type for n in graph.node)


def count_nodes(graph):
    """Nodes in the graph and in every subgraph (If/Loop/Scan bodies)."""
    import onnx

    n = 0
    for node in graph.node:
        n += 1
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                n += count_nodes(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                n += sum(count_nodes(g) for g in a.graphs)
    return n


def summary(proto, path):
    hist = histogram(proto.graph)
    dims = lambda vi: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]  # noqa: E731
    return {
        "file": os.path.basename(path),
        "file_bytes": os.path.getsize(path),
        "opset": max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=None),
        "nodes": len(proto.graph.node),
        "nodes_with_subgraphs": count_nodes(proto.graph),
        "initializers": len(proto.graph.initializer),
        "inputs": {vi.name: dims(vi) for vi in proto.graph.input},
        "outputs": {vi.name: dims(vi) for vi in proto.graph.output},
        "op_types": dict(hist.most_common()),
    }


def export_train(spec, model, out_dir):
    import onnx
    import torch

    shapes = TEXT_SHAPES if spec.family == TEXT else VISION_SHAPES
    x = example(spec, shapes[0])
    in_name, axes = io_names(spec)
    with torch.no_grad():
        out_shape = list(model(x).shape)
    out_axes = {0: "batch", 1: "seq"} if spec.family == TEXT and len(out_shape) > 2 else {0: "batch"}
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), buf, input_names=[in_name], output_names=["logits"],
                          dynamic_axes={in_name: axes, "logits": out_axes}, opset_version=OPSET_USED[0],
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, dynamo=False)
    proto = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(proto)
    ort_shapes = run_ort(spec, buf.getvalue(), shapes, out_shape)
    path = os.path.join(out_dir, f"{spec.name}.train.onnx")
    stripped = strip_and_save(proto, path)
    info = summary(stripped, path)
    info.update(exporter="torchscript", training=True, output_shape_at_export=out_shape, ort_checked_inputs=ort_shapes,
                dropout_nodes=info["op_types"].get("Dropout", 0))
    if info["dropout_nodes"] == 0:
        info["warning"] = "no Dropout node in a training-mode export"
    return info


def export_dynamo(spec, model, out_dir):
    import onnx
    import torch

    shapes = TEXT_SHAPES if spec.family == TEXT else VISION_SHAPES
    x = example(spec, shapes[0])
    in_name, axes = io_names(spec)
    model.eval()
    with torch.no_grad():
        out_shape = list(model(x).shape)
    dims = {0: torch.export.Dim("batch", min=1, max=1024)}
    if spec.family == TEXT:
        dims[1] = torch.export.Dim("seq", min=2, max=spec.max_seq or 4096)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(model, (x,), dynamo=True, verbose=False, input_names=[in_name],
                                 output_names=["logits"], dynamic_shapes=(dims,))
    proto = prog.model_proto
    model_bytes = proto.SerializeToString()
    ort_shapes = run_ort(spec, model_bytes, shapes, out_shape)
    path = os.path.join(out_dir, f"{spec.name}.dynamo.onnx")
    stripped = strip_and_save(proto, path)
    info = summary(stripped, path)
    info.update(exporter="dynamo", training=False, output_shape_at_export=out_shape, ort_checked_inputs=ort_shapes)
    return info


def line(name, kind, info=None, error=None, seconds=0.0):
    if error:
        return f"{name:<12} {kind:<6} FAILED ({seconds:.1f} s): {error}"
    top = ", ".join(f"{op} {n}" for op, n in collections.Counter(info["op_types"]).most_common(10))
    return (f"{name:<12} {kind:<6} ok  {info['file_bytes'] / 1024:8.1f} KiB  {info['nodes']:5d} nodes"
            f"  ({seconds:.1f} s)  {top}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/onnx_transformers", help="output folder (made if missing)")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--attn", default="eager", choices=["eager", "sdpa"],
                    help="attention implementation traced into the training export")
    ap.add_argument("--dynamo", default=DEFAULT_DYNAMO,
                    help=f"models also exported in eval mode by the dynamo exporter: names, 'all' or 'none' "
                         f"(default {DEFAULT_DYNAMO})")
    ap.add_argument("--opset", type=int, default=OPSET, help=f"opset of the TorchScript export (default {OPSET})")
    ap.add_argument("--verbose", action="store_true", help="print tracebacks of failures")
    args = ap.parse_args()
    OPSET_USED[0] = args.opset

    if args.list:
        for spec in MODELS.values():
            print(f"{spec.name:<12} {spec.family:<6} {spec.description}")
        return 0
    specs = select(args.only)
    dynamo = set(MODELS) if args.dynamo == "all" else set() if args.dynamo == "none" else \
        {n.strip() for n in args.dynamo.split(",") if n.strip()}

    import onnx
    import torch
    import transformers

    try:
        import timm
        timm_version = timm.__version__
    except ImportError:
        timm_version = None
    try:
        import onnxruntime
        ort_version = onnxruntime.__version__
    except ImportError:
        ort_version = None
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    versions = {"torch": torch.__version__, "transformers": transformers.__version__, "timm": timm_version,
                "onnx": onnx.__version__, "onnxruntime": ort_version, "python": sys.version.split()[0]}
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    path = os.path.join(args.out, "manifest.json")
    old = {}
    if os.path.exists(path):  # --only updates the entries of the models it names
        with open(path) as f:
            old = json.load(f).get("models", {})
    manifest = {"versions": versions, "opset": args.opset, "attn": args.attn, "size_threshold": SIZE_THRESHOLD,
                "models": old}
    failures = 0
    for spec in specs:
        entry = {"family": spec.family, "description": spec.description}
        try:
            model = build(spec.name, attn=args.attn)
            entry["parameters"] = sum(p.numel() for p in model.parameters())
            entry["parameter_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
        except Exception as e:  # noqa: BLE001  (report and go on with the next model)
            entry["build_error"] = f"{type(e).__name__}: {e}"
            print(line(spec.name, "build", error=entry["build_error"]), flush=True)
            if args.verbose:
                traceback.print_exc()
            manifest["models"][spec.name] = entry
            failures += 1
            continue
        jobs = [("train", export_train)] + ([("dynamo", export_dynamo)] if spec.name in dynamo else [])
        for kind, fn in jobs:
            t0 = time.time()
            try:
                info = fn(spec, model, args.out)
                if info["file_bytes"] > MAX_FILE_BYTES:
                    info["warning"] = f"file is {info['file_bytes']} bytes, over {MAX_FILE_BYTES}"
                entry[kind] = info
                print(line(spec.name, kind, info, seconds=time.time() - t0), flush=True)
                if "warning" in info:
                    print(f"{'':<12} {kind:<6} warning: {info['warning']}", flush=True)
            except Exception as e:  # noqa: BLE001
                msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:400]
                entry[kind] = {"error": msg}
                print(line(spec.name, kind, error=msg, seconds=time.time() - t0), flush=True)
                if args.verbose:
                    traceback.print_exc()
                failures += 1
            finally:
                model.train()
        manifest["models"][spec.name] = entry
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"wrote {path}; {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
