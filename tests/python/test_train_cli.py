# `memplan train` on the CPU: a data-parallel run through the host stand-in of the collectives (--gpus 1) is the
# plain run, loss for loss and gradient for gradient (the reductions are wired and change nothing in a world of one);
# --save-grads writes the gradients it reports; --zero 1/2 in a world of one is the plain run too; the launch's usage
# errors.
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("skip: numpy is not installed")
    sys.exit(77)


def train(memplan, model, *extra):
    p = subprocess.run([memplan, "train", model, "--json", *extra], capture_output=True, text=True)
    return p.returncode, (json.loads(p.stdout) if p.returncode == 0 else p.stderr)


def bf16_weight_model(path):
    """y = float(bf16(x) @ w) with w a bfloat16 initializer [8, 3]."""
    import onnx
    from onnx import TensorProto, helper

    w = (np.arange(24, dtype=np.float32).reshape(8, 3) / 10 - 1).astype(np.float32)
    bits = (w.view(np.uint32) >> 16).astype(np.uint16)  # exact in bfloat16: the top 16 bits
    nodes = [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
             helper.make_node("MatMul", ["xb", "w"], ["yb"]),
             helper.make_node("Cast", ["yb"], ["y"], to=TensorProto.FLOAT)]
    g = helper.make_graph(nodes, "bf16_weight", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
                          [helper.make_tensor("w", TensorProto.BFLOAT16, [8, 3], bits.tobytes(), raw=True)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=True)
    a = ap.parse_args()
    mlp = os.path.join(a.samples, "models", "tiny_mlp.onnx")
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)
            print("FAIL:", what)

    rc, plain = train(a.memplan, mlp, "--steps", "3")
    check(rc == 0, f"plain run: {plain}")
    rc, dp = train(a.memplan, mlp, "--steps", "3", "--gpus", "1", "--rank", "0")
    check(rc == 0, f"--gpus 1: {dp}")
    if isinstance(plain, dict) and isinstance(dp, dict):
        check(dp["data_parallel"] and dp["collectives"] == "local", "the host collectives are used")
        check(plain["reduce_calls"] == 0 and dp["reduce_calls"] >= 1, "reductions only with --gpus")
        check(dp["reduced_bytes"] > 0 and plain["reduced_bytes"] == 0, "gradient bytes reduced")
        check(plain["losses"] == dp["losses"], f"losses {plain['losses']} vs {dp['losses']}")
        check(plain["gradient_norms"] == dp["gradient_norms"], "first-step gradients equal")
        check(plain["arena_bytes"] == dp["arena_bytes"], "the same plan")

    # ZeRO-1/2 in a world of one (reduce-scatter and all-gather through the host collectives): the plain run's
    # losses and gradients, for Adam and momentum; the JSON says what the rank holds.
    for opt in ("adam", "momentum"):
        rc, ref = train(a.memplan, mlp, "--steps", "3", "--optimizer", opt)
        check(rc == 0, f"{opt}: {ref}")
        for stage in ("1", "2"):
            rc, z = train(a.memplan, mlp, "--steps", "3", "--optimizer", opt, "--gpus", "1", "--zero", stage)
            check(rc == 0, f"--zero {stage} {opt}: {z}")
            if isinstance(ref, dict) and isinstance(z, dict):
                check(z["losses"] == ref["losses"], f"--zero {stage} {opt}: losses {z['losses']} vs {ref['losses']}")
                check(z["gradient_norms"] == ref["gradient_norms"], f"--zero {stage} {opt}: first-step gradients equal")
                zs = z["zero"]
                check(zs["stage"] == int(stage) and zs["sharded_updates"] == len(ref["gradient_norms"]), f"zero fields {zs}")
                check(zs["owned_elements"] == zs["weight_elements"] > 0, "a world of one owns every element")
                check(zs["optimizer_state_unsharded_bytes"] == (2 if opt == "adam" else 1) * 4 * zs["weight_elements"],
                      f"{opt}: the state per weight element")
                check(zs["all_gather_calls"] == z["reduce_calls"] and zs["gather_buffer_bytes"] > 0, "one all-gather per bucket")
                check(ref["zero"]["stage"] == 0 and ref["zero"]["optimizer_state_shard_bytes"] == 0, "no ZeRO by default")
                check(abs(z["optimizer_state_bytes"] - ref["optimizer_state_bytes"]) < 64 * len(ref["gradient_norms"]) * 2,
                      "one rank holds all the state")

    # Gradients written by --save-grads are the executor's, one file per weight.
    with tempfile.TemporaryDirectory() as tmp:
        rc, out = train(a.memplan, mlp, "--steps", "1", "--gpus", "1", "--save-grads", tmp)
        check(rc == 0, f"--save-grads: {out}")
        files = sorted(f for f in os.listdir(tmp) if f.startswith("grad_"))
        check(len(files) == len(out["gradient_norms"]) if isinstance(out, dict) else False, "one file per gradient")
        if isinstance(out, dict) and files:
            g0 = np.load(os.path.join(tmp, "grad_0.npy")).astype(np.float64)
            check(abs(float(np.sqrt((g0 ** 2).sum())) - out["gradient_norms"][0]["norm"]) <= 1e-9 * max(1.0, out["gradient_norms"][0]["norm"]),
                  "the saved gradient has the reported norm")

    # A weight stored in bfloat16 trains too; .npy has no bfloat16, so its gradient is written as float32 (exactly).
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "bf16_weight.onnx")
        bf16_weight_model(model)
        out_dir = os.path.join(tmp, "grads")
        rc, out = train(a.memplan, model, "--steps", "1", "--save-grads", out_dir)
        check(rc == 0, f"--save-grads of a bfloat16 weight: {out}")
        if rc == 0:
            g = np.load(os.path.join(out_dir, "grad_0.npy"))
            check(g.dtype == np.float32 and g.shape == (8, 3), f"the bfloat16 gradient as float32 [8, 3]: {g.dtype} {g.shape}")
            norm = out["gradient_norms"][0]["norm"]
            check(abs(float(np.sqrt((g.astype(np.float64) ** 2).sum())) - norm) <= 1e-9 * max(1.0, norm),
                  "the saved bfloat16 gradient has the reported norm")

    # Launch errors are usage errors (exit 2) with a message naming the option.
    for args, needle in [(["--gpus", "2"], "--nccl-id-file"),
                         (["--gpus", "2", "--nccl-id-file", "/nonexistent/id"], "--backend cpu"),
                         (["--gpus", "2", "--rank", "2", "--nccl-id-file", "x"], "--rank"),
                         (["--gpus", "1", "--microbatches", "2"], "--microbatches"),
                         (["--steps", "0"], "--steps"),
                         (["--zero", "1"], "--gpus"),
                         (["--gpus", "1", "--zero", "4"], "--zero 4"),
                         (["--gpus", "1", "--zero", "1", "--save-grads", "/tmp/x"], "--save-grads")]:
        rc, err = train(a.memplan, mlp, *args)
        check(rc == 2 and needle in str(err), f"{args}: exit {rc}, {err}")
    # ZeRO-3 and a step without an optimizer update are not run (unsupported: exit 5).
    for args, needle in [(["--gpus", "1", "--zero", "3"], "stage 3"),
                         (["--gpus", "1", "--zero", "1", "--optimizer", "none"], "optimizer")]:
        rc, err = train(a.memplan, mlp, *args)
        check(rc == 5 and needle in str(err), f"{args}: exit {rc}, {err}")
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
