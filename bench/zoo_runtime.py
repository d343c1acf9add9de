"""The zoo's ONNX exports run by memplan's own runtimes: each model exported as bench/zoo_onnx.py does (TorchScript
exporter, training mode, nothing folded), then one planned training step per case run by `memplan train` on the
host runtime and on the CUDA runtime, and the two compared: the first loss and the gradient norm of that step.

    python3 bench/zoo_runtime.py --out runtime.jsonl [--ids FILE] [--jobs N] [--timeout 900]
    env: MEMPLAN_ZOO_GPUS=N (the CUDA runs, spread over N devices by entry; 0 or unset: host only)
         MEMPLAN_ZOO_RUNTIME_BATCH (default 2: the example's batch cut to this many rows before the export; the
           comparison does not depend on the batch (2: batch norm over a pooled map needs two rows), and the host runtime's convolutions are slow at the zoo's)
         MEMPLAN_ZOO_CUDA_STEPS (default 2: the CUDA runtime also runs the optimizer step and a second forward)

Case flags as bench/zoo_onnx.py (fp32: `--loss ce --optimizer none`; bf16_adamw: `--loss ce --optimizer adamw
--precision bf16`), plus `--no-dropout` (the two runtimes draw different random numbers; without dropout the step
is deterministic up to the order of floating-point sums). Every run plans the keep-all step (no budget).
Per row: `exported` (or `export_error`), per backend `<backend>_exit`, `<backend>_error` (memplan's first error
line), `<backend>_loss` (the first step's loss), `<backend>_grad_norm` (its gradients' global L2 norm),
`<backend>_seconds`, `<backend>_planned_peak_bytes`; `cuda_losses` (every step's loss), `cuda_host_fallbacks` (the
op types the CUDA runtime ran on the host); and the comparison: `loss_rel_diff`, `grad_norm_rel_diff`,
`worst_weight` and `worst_weight_rel_diff` (the weight whose gradient norm differs most), `agree` (loss and norm
within the case's tolerance: 1e-4 and 1e-3 relative in fp32, 2e-2 and 5e-2 in bf16, where a 16-bit matmul's
rounding differs between the two runtimes' summation orders).
"""
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

from zoo_onnx import CASE_FLAGS, MEMPLAN, export_entry, memplan_build, plan_error  # noqa: E402

RUN_TIMEOUT = int(os.environ.get("MEMPLAN_ZOO_RUN_TIMEOUT", "420"))
# (loss, gradient norm): the loss of one forward; the norm sums every weight's gradient, where batch norm over the
# runtime check's two rows amplifies the summation-order differences of the convolutions before it.
TOLERANCE = {"fp32": (1e-4, 1e-3), "bf16_adamw": (2e-2, 5e-2)}


def gpu_of(entry_id):
    """The device an entry's CUDA runs use: spread by a hash of its id (stable across runs and resumes)."""
    n = int(os.environ.get("MEMPLAN_ZOO_GPUS", "0") or 0)
    if n <= 0:
        return None
    return int(hashlib.sha1(entry_id.encode()).hexdigest(), 16) % n


def train(path, case, backend, device=None, steps=1):
    cmd = [MEMPLAN, "train", path, "--train", "--loss", "ce", "--no-dropout", "--json", "--steps", str(steps),
           "--backend", backend, *CASE_FLAGS[case]]
    if device is not None:
        cmd += ["--device", str(device)]
    t = time.time()
    key = "cpu" if backend == "cpu" else "cuda"
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {f"{key}_exit": None, f"{key}_error": f"timeout {RUN_TIMEOUT}s",
                f"{key}_seconds": round(time.time() - t, 2)}
    r = {f"{key}_exit": p.returncode, f"{key}_seconds": round(time.time() - t, 2)}
    if p.returncode != 0:
        r[f"{key}_error"] = plan_error(p.stderr)
        return r
    j = json.loads(p.stdout)
    losses = j.get("losses") or []
    r.update({f"{key}_loss": losses[0] if losses else None, f"{key}_grad_norm": j.get("gradient_norm"),
              f"{key}_planned_peak_bytes": j.get("planned_peak_bytes"),
              f"{key}_grad_norms": {g["weight"]: g["norm"] for g in j.get("gradient_norms") or []}})
    if key == "cuda":
        r["cuda_losses"] = losses
        r["cuda_host_fallbacks"] = sorted({f["type"] for f in j.get("host_fallbacks") or []})
    return r


def rel(a, b):
    if a is None or b is None or not all(map(math.isfinite, (a, b))):
        return None
    return abs(a - b) / max(abs(b), 1e-12)


def compare(r, case):
    if r.get("cpu_exit") != 0 or r.get("cuda_exit") != 0:
        r["agree"] = False
        return r
    r["loss_rel_diff"] = rel(r.get("cuda_loss"), r.get("cpu_loss"))
    r["grad_norm_rel_diff"] = rel(r.get("cuda_grad_norm"), r.get("cpu_grad_norm"))
    # The weight whose gradient norm differs most (among those above a thousandth of the largest): where to look.
    a, b = r.pop("cuda_grad_norms", {}), r.pop("cpu_grad_norms", {})
    b = {w: n for w, n in b.items() if n is not None}  # a norm JSON could not hold (NaN) is left out
    floor = 1e-3 * max(b.values(), default=0.0)
    worst = max(((rel(a.get(w), n), w) for w, n in b.items() if n > floor and rel(a.get(w), n) is not None),
                default=(None, None))
    r["worst_weight_rel_diff"], r["worst_weight"] = worst
    tol_loss, tol_grad = TOLERANCE[case]
    r["agree"] = (r["loss_rel_diff"] is not None and r["loss_rel_diff"] <= tol_loss and
                  r["grad_norm_rel_diff"] is not None and r["grad_norm_rel_diff"] <= tol_grad)
    return r


def cut_batch(inputs):
    """The inputs with their leading (batch) axis cut to MEMPLAN_ZOO_RUNTIME_BATCH rows, where every input has it."""
    import torch

    rows = int(os.environ.get("MEMPLAN_ZOO_RUNTIME_BATCH", "2") or 0)
    tensors = [x for x in inputs if torch.is_tensor(x)]
    if rows <= 0 or not tensors or any(x.dim() == 0 for x in tensors):
        return inputs
    batch = tensors[0].shape[0]
    if batch <= rows or any(x.shape[0] != batch for x in tensors):
        return inputs
    return [x[:rows].contiguous() if torch.is_tensor(x) else x for x in inputs]


def run_one(entry, cases):
    import torch

    rows = []
    gpu = gpu_of(entry["id"])
    cuda_steps = int(os.environ.get("MEMPLAN_ZOO_CUDA_STEPS", "2"))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        export_error, export_seconds = export_entry(entry, path, cut_batch)
        for case in cases:
            r = {"id": entry["id"], "case": case, "route": "onnx-runtime", "torch": torch.__version__,
                 "exported": export_error is None, "export_seconds": export_seconds, "memplan": memplan_build()}
            if export_error:
                r.update(ok=False, export_error=export_error, error="export: " + export_error)
                rows.append(r)
                continue
            r.update(train(path, case, "cpu"))
            if gpu is not None:
                r["gpu"] = gpu
                r.update(train(path, case, "cuda", gpu, cuda_steps))
                compare(r, case)
            r.pop("cpu_grad_norms", None)
            r.pop("cuda_grad_norms", None)
            r["ok"] = r.get("cpu_exit") == 0 and (gpu is None or r.get("cuda_exit") == 0)
            if not r["ok"]:
                r["error"] = r.get("cpu_error") or r.get("cuda_error") or "run failed"
            rows.append(r)
    return rows


if __name__ == "__main__":
    import zoo

    zoo.main(__file__, run_one, __doc__)
