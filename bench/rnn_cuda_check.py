"""The zoo's recurrent models (and any other zoo ids) on memplan's CUDA runtime beside its CPU executor, on the GPU
machine: each model exported as bench/zoo_onnx.py does (TorchScript exporter, training mode, opset 17, the model's
own initial weights), then `memplan train --loss ce --lr 0 --steps 3` on the CPU and on CUDA, fp32 and under bf16
autocast; the first losses compared (relative difference), the step time and the planned peak. One JSON
line per model and precision.

    python3 bench/rnn_cuda_check.py --memplan .carry/bin/memplan --out rnn_cuda.jsonl [--ids rnn/lstm_lm,...]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

DEFAULT_IDS = "rnn/lstm_lm,rnn/gru_lm,rnn/rnn_lm,timm/sequencer2d_l"


def train(memplan, path, backend, precision):
    t0 = time.time()
    r = subprocess.run([memplan, "train", path, "--loss", "ce", "--lr", "0", "--steps", "3", "--backend", backend,
                        "--precision", precision, "--json"], capture_output=True, text=True, timeout=900)
    out = {"exit": r.returncode, "seconds": round(time.time() - t0, 1)}
    if r.returncode != 0:
        out["error"] = r.stderr.strip().splitlines()[-1][:300] if r.stderr.strip() else ""
        return out
    j = json.loads(r.stdout)
    out.update({k: j.get(k) for k in ("losses", "step_seconds", "steps_timed", "planned_peak_bytes", "arena_bytes", "backend")})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ids", default=DEFAULT_IDS)
    a = ap.parse_args()
    import torch
    import zoo
    import zoo_onnx

    entries = {e["id"]: e for e in zoo.list_zoo()}
    with tempfile.TemporaryDirectory() as d, open(a.out, "a") as f:
        for mid in a.ids.split(","):
            torch.manual_seed(0)
            model, inputs, _, _ = zoo.build(entries[mid])
            path = os.path.join(d, mid.replace("/", "_") + ".onnx")
            zoo_onnx.export(model, inputs, path)
            for precision in ("fp32", "bf16"):
                row = {"id": mid, "precision": precision, "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
                row["cpu"] = train(a.memplan, path, "cpu", precision)
                row["cuda"] = train(a.memplan, path, "cuda", precision)
                lc, lg = [(row[k].get("losses") or [None])[0] for k in ("cpu", "cuda")]
                if lc is not None and lg is not None:
                    row["first_loss_rel_diff"] = abs(lg - lc) / max(abs(lc), 1e-12)
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")
                f.flush()


if __name__ == "__main__":
    main()
