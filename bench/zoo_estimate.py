"""memplan_torch.estimate_step for every zoo model and case, on the CPU (no GPU): the figures zoo_report.py holds
against zoo_truth.py's measurements.

    python3 bench/zoo_estimate.py --out estimate.jsonl [--jobs 2] [--ids FILE] [--gpu h100]
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

GPU = os.environ.get("MEMPLAN_ZOO_GPU", "h100")


def run_one(entry, cases):
    import torch

    import zoo
    from memplan_torch import estimate_step

    rows = []
    for case in cases:
        r = {"id": entry["id"], "case": case, "gpu": GPU, "torch": torch.__version__}
        t0 = time.time()
        try:
            torch.manual_seed(0)
            model, inputs, targets, loss_fn = zoo.build(entry)
            opt_fn, ac_dtype = zoo.case_args(case)
            est = estimate_step(model, inputs, loss_fn=loss_fn, targets=targets, optimizer=opt_fn,
                                autocast_dtype=ac_dtype, gpu=GPU)
            r.update(est)
            r["ok"] = True
        except Exception as e:  # noqa: BLE001 - recorded per entry
            r["ok"] = False
            r["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        r["seconds"] = round(time.time() - t0, 2)
        rows.append(r)
    return rows


if __name__ == "__main__":
    import zoo

    zoo.main(__file__, run_one, __doc__)
