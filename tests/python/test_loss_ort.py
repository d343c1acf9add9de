# Cross-entropy against ONNX Runtime's SoftmaxCrossEntropyLoss: `memplan run` of the ONNX op (the CPU kernel
# shared with memplan's CrossEntropyLoss, runtime_allocator/kernels/kernels_loss.cpp) on classification [N, C],
# segmentation [N, C, H, W] and language-model [B*S, V] scores, with ignored labels (-100); loss and log_prob.
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    import onnxruntime as ort
except ImportError:
    print("skip: numpy, onnx or onnxruntime is not installed")
    sys.exit(77)


def model(path, scores_shape, reduction):
    labels_shape = [scores_shape[0]] + list(scores_shape[2:])
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["loss", "log_prob"],
                            reduction=reduction, ignore_index=-100)
    loss_shape = labels_shape if reduction == "none" else []
    g = helper.make_graph([node], "ce",
                          [helper.make_tensor_value_info("scores", TensorProto.FLOAT, scores_shape),
                           helper.make_tensor_value_info("labels", TensorProto.INT64, labels_shape)],
                          [helper.make_tensor_value_info("loss", TensorProto.FLOAT, loss_shape),
                           helper.make_tensor_value_info("log_prob", TensorProto.FLOAT, scores_shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m)
    onnx.save(m, path)


def run_memplan(memplan, path, inputs, outputs, *extra):
    cmd = [memplan, "run", path, *extra]
    for i in inputs:
        cmd += ["--input", i]
    for o in outputs:
        cmd += ["--output", o]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr}")
    return [np.load(o) for o in outputs]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=True)
    a = ap.parse_args()
    rng = np.random.default_rng(7)
    cases = [("classification", [6, 5], "mean"), ("segmentation", [2, 4, 3, 3], "mean"),
             ("language model", [32, 3000], "mean"), ("sum", [6, 5], "sum"), ("per row", [2, 4, 3, 3], "none")]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for k, (name, shape, reduction) in enumerate(cases):
            path = os.path.join(tmp, f"ce{k}.onnx")
            model(path, shape, reduction)
            scores = (rng.standard_normal(shape) * 3).astype(np.float32)
            labels_shape = [shape[0]] + shape[2:]
            labels = rng.integers(0, shape[1], size=labels_shape).astype(np.int64)
            labels.flat[1] = -100
            sp, lp = os.path.join(tmp, f"s{k}.npy"), os.path.join(tmp, f"l{k}.npy")
            np.save(sp, scores)
            np.save(lp, labels)
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            want_loss, want_logp = sess.run(None, {"scores": scores, "labels": labels})
            outs = [os.path.join(tmp, f"o{k}_{j}.npy") for j in range(2)]
            got_loss, got_logp = run_memplan(a.memplan, path, [sp, lp], outs)
            unshared = run_memplan(a.memplan, path, [sp, lp], outs, "--unshared")
            dl = float(np.max(np.abs(got_loss.astype(np.float64) - want_loss) / (1e-6 + np.abs(want_loss))))
            dp = float(np.max(np.abs(got_logp.astype(np.float64) - want_logp)))
            same = got_loss.tobytes() == unshared[0].tobytes() and got_logp.tobytes() == unshared[1].tobytes()
            ok = got_loss.shape == want_loss.shape and dl <= 1e-5 and dp <= 1e-4 and same
            print(f"{name:15s} {str(shape):16s} {reduction:4s} loss {float(np.sum(got_loss)):.6f} vs {float(np.sum(want_loss)):.6f}"
                  f" rel {dl:.2g}, max |log_prob diff| {dp:.2g}, planned==unshared {same} {'ok' if ok else 'FAIL'}")
            failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
