"""The ONNX route on the zoo: each model exported with the TorchScript exporter in training mode (nothing folded,
the README's recipe), planned by `memplan plan --train` for both cases, and its `pytorch_peak_bytes` (memplan's
model of PyTorch eager) written beside estimate_step's figures for zoo_report.py to hold against the GPU's.

    python3 bench/zoo_onnx.py --out onnx.jsonl [--ids FILE] [--jobs 1] [--memplan build/memplan]

Case flags: fp32 -> `--loss ce --optimizer none`; bf16_adamw -> `--loss ce --optimizer adamw --precision bf16`.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

MEMPLAN = os.environ.get("MEMPLAN_BIN", os.path.join(os.path.dirname(HERE), "build", "memplan"))
CASE_FLAGS = {"fp32": ["--optimizer", "none"], "bf16_adamw": ["--optimizer", "adamw", "--precision", "bf16"]}


def export(model, inputs, path):
    import torch

    model.train()
    torch.onnx.export(model, tuple(inputs), path, dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=17, input_names=["input"])


def run_one(entry, cases):
    import torch

    import zoo

    rows = []
    t0 = time.time()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        try:
            torch.manual_seed(0)
            model, inputs, _, _ = zoo.build(entry)
            export(model, inputs, path)
            exported = None
        except Exception as e:  # noqa: BLE001 - recorded per entry
            exported = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        for case in cases:
            r = {"id": entry["id"], "case": case, "route": "onnx"}
            if exported:
                r.update(ok=False, error="export: " + exported)
                rows.append(r)
                continue
            p = subprocess.run([MEMPLAN, "plan", path, "--train", "--loss", "ce", "--json", *CASE_FLAGS[case]],
                               capture_output=True, text=True, timeout=600)
            if p.returncode != 0:
                r.update(ok=False, error=f"plan exit {p.returncode}: {p.stderr.strip().splitlines()[-1][:300] if p.stderr.strip() else ''}")
            else:
                j = json.loads(p.stdout)
                r.update(ok=True, peak_allocated_bytes=j["pytorch_peak_bytes"], memplan_peak_bytes=j["peak_bytes"],
                         doubts=j.get("pytorch_peak_doubts", []),
                         # the zoo_report fields: only the peak is predicted on this route
                         before_step_bytes=j["persistent_bytes"] + j.get("input_bytes", 0),
                         peak_reserved_bytes=j["pytorch_peak_bytes"])
            rows.append(r)
    for r in rows:
        r["seconds"] = round(time.time() - t0, 1)
    return rows


if __name__ == "__main__":
    import zoo

    zoo.main(__file__, run_one, __doc__)
