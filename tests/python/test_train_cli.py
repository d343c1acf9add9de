# `memplan train` on the CPU: a data-parallel run through the host stand-in of the collectives (--dp-world 1) is the
# plain run, loss for loss and gradient for gradient (the reductions are wired and change nothing in a world of one);
# --save-grads writes the gradients it reports; the launch's usage errors.
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
    rc, dp = train(a.memplan, mlp, "--steps", "3", "--dp-world", "1", "--dp-rank", "0")
    check(rc == 0, f"--dp-world 1: {dp}")
    if isinstance(plain, dict) and isinstance(dp, dict):
        check(dp["data_parallel"] and dp["collectives"] == "local", "the host collectives are used")
        check(plain["reduce_calls"] == 0 and dp["reduce_calls"] >= 1, "reductions only with --dp-world")
        check(dp["reduced_bytes"] > 0 and plain["reduced_bytes"] == 0, "gradient bytes reduced")
        check(plain["losses"] == dp["losses"], f"losses {plain['losses']} vs {dp['losses']}")
        check(plain["gradient_norms"] == dp["gradient_norms"], "first-step gradients equal")
        check(plain["arena_bytes"] == dp["arena_bytes"], "the same plan")

    # Gradients written by --save-grads are the executor's, one file per weight.
    with tempfile.TemporaryDirectory() as tmp:
        rc, out = train(a.memplan, mlp, "--steps", "1", "--dp-world", "1", "--save-grads", tmp)
        check(rc == 0, f"--save-grads: {out}")
        files = sorted(f for f in os.listdir(tmp) if f.startswith("grad_"))
        check(len(files) == len(out["gradient_norms"]) if isinstance(out, dict) else False, "one file per gradient")
        if isinstance(out, dict) and files:
            g0 = np.load(os.path.join(tmp, "grad_0.npy")).astype(np.float64)
            check(abs(float(np.sqrt((g0 ** 2).sum())) - out["gradient_norms"][0]["norm"]) <= 1e-9 * max(1.0, out["gradient_norms"][0]["norm"]),
                  "the saved gradient has the reported norm")

    # Launch errors are usage errors (exit 2) with a message naming the option.
    for args, needle in [(["--dp-world", "2"], "--dp-id"),
                         (["--dp-world", "2", "--dp-id", "/nonexistent/id"], "--backend cpu"),
                         (["--dp-world", "2", "--dp-rank", "2", "--dp-id", "x"], "--dp-rank"),
                         (["--dp-world", "1", "--microbatches", "2"], "--microbatches"),
                         (["--steps", "0"], "--steps")]:
        rc, err = train(a.memplan, mlp, *args)
        check(rc == 2 and needle in str(err), f"{args}: exit {rc}, {err}")
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
