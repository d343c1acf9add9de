# `memplan run` on the tiny models against ONNX Runtime on the same input (1e-4), and planned == unshared.
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnxruntime as ort
except ImportError:
    print("skip: numpy or onnxruntime is not installed")
    sys.exit(77)


def run_memplan(memplan, model, inputs, out, *extra):
    cmd = [memplan, "run", model, "--output", out, *extra]
    for i in inputs:
        cmd += ["--input", i]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr}")
    return np.load(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=True)
    a = ap.parse_args()
    models = os.path.join(a.samples, "models")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in ["tiny_mlp", "tiny_cnn", "tiny_gpt"]:
            model = os.path.join(models, name + ".onnx")
            inp = os.path.join(models, name + ".input.npy")
            x = np.load(inp)
            sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
            want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
            planned = run_memplan(a.memplan, model, [inp], os.path.join(tmp, name + ".planned.npy"))
            unshared = run_memplan(a.memplan, model, [inp], os.path.join(tmp, name + ".unshared.npy"), "--unshared")
            diff = float(np.max(np.abs(planned.astype(np.float64) - want))) if want.size else 0.0
            same = planned.dtype == unshared.dtype and planned.shape == unshared.shape and planned.tobytes() == unshared.tobytes()
            ok = planned.shape == want.shape and diff <= 1e-4 and same
            print(f"{name:10s} shape {planned.shape} max |memplan - onnxruntime| {diff:.3g} planned==unshared {same}"
                  f" {'ok' if ok else 'FAIL'}")
            failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
