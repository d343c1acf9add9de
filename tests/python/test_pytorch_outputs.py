#!/usr/bin/env python3
"""`memplan plan --pytorch-outputs held|freed`: PyTorch's loop holding the model's output to the end of the step
(`out = model(x); loss = loss_fn(out, y)`, estimate_step's loop) against the loss taken inline. Held costs the
output's bytes at a backward peak and never more than twice them (the previous step's output lives until the new
one is made); an MSE loss holds its prediction too; a bad value is refused naming the flag. Exit 77 when the
command or the samples are missing."""
import json
import math
import os
import subprocess
import sys

from viz_testlib import check, cli_args, failures

A = cli_args()
if A is None:
    sys.exit(77)


def plan(model, *extra):
    r = subprocess.run([A.memplan, "plan", os.path.join(A.samples, "models", model), "--train", "--packer", "greedy_by_size",
                        "--exact-pack-seconds", "0", *extra, "--json"], capture_output=True, text=True)
    check(r.returncode == 0, f"plan {model} {' '.join(extra)}: exit {r.returncode} {r.stderr[-300:]}")
    return json.loads(r.stdout) if r.returncode == 0 else None


def output_bytes(model):
    import onnx

    m = onnx.load(os.path.join(A.samples, "models", model), load_external_data=False)
    dims = [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim]
    return -(-4 * math.prod(dims) // 256) * 256


for model, loss in (("tiny_gpt.onnx", "ce"), ("tiny_mlp.onnx", "ce"), ("tiny_mlp.onnx", "mse")):
    held = plan(model, "--loss", loss, "--optimizer", "adamw")
    freed = plan(model, "--loss", loss, "--optimizer", "adamw", "--pytorch-outputs", "freed")
    if not (held and freed):
        continue
    check(held["pytorch_outputs"] == "held" and freed["pytorch_outputs"] == "freed", "the JSON names the loop")
    diff = held["pytorch_peak_bytes"] - freed["pytorch_peak_bytes"]
    try:
        out = output_bytes(model)
        check(0 < diff <= 2 * out, f"{model} {loss}: held - freed = {diff}, output {out} bytes")
    except ImportError:
        check(diff > 0, f"{model} {loss}: held - freed = {diff}")
    check(held["peak_bytes"] == freed["peak_bytes"], "memplan's own plan does not depend on PyTorch's loop")

r = subprocess.run([A.memplan, "plan", os.path.join(A.samples, "models", "tiny_mlp.onnx"), "--train", "--pytorch-outputs", "kept"],
                   capture_output=True, text=True)
check(r.returncode == 2 and "--pytorch-outputs" in r.stderr, f"a bad value: exit {r.returncode} {r.stderr[-200:]}")
print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
