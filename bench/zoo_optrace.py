"""Per-op allocated bytes of a zoo model's measured step, on the GPU and in estimate_step, to find what an
estimate misses: each ATen op of the last step with torch.cuda.memory_allocated after it and the transient
bytes above that within it (GPU), beside estimate_step(op_log=True)'s replay (CPU).

    python3 bench/zoo_optrace.py --gpu-side ID CASE > ID.gpu.json     (on the GPU machine)
    python3 bench/zoo_optrace.py --diff ID.gpu.json                   (here: runs the estimate, aligns the ops)
"""
import argparse
import difflib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))


def gpu_side(entry_id, case):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    import zoo
    from memplan_torch.step_loop import run_steps, to_device

    entry = next(e for e in zoo.list_zoo() if e["id"] == entry_id)
    model, trained, inputs, targets, loss_fn, opt, autocast = zoo.cuda_case(entry, case)
    log = []

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            out = func(*args, **(kwargs or {}))
            torch.cuda.synchronize()
            now = torch.cuda.memory_allocated()
            log.append((func._overloadpacket.__name__, now, torch.cuda.max_memory_allocated() - now))
            return out

    mode = [None]

    def on_phase(step, name):
        if step == 2 and name == "inputs":
            mode[0] = Ops()
            mode[0].__enter__()
            log.append(("<step>", torch.cuda.memory_allocated(), 0))
        if step == 2 and name == "end":
            mode[0].__exit__(None, None, None)

    run_steps(model, trained, inputs, targets, loss_fn, opt, autocast, 3, lambda o: to_device(o, "cuda"), on_phase)
    json.dump({"id": entry_id, "case": case, "ops": log}, sys.stdout)


def diff(path, threshold):
    import torch

    import zoo
    from memplan_torch.estimate import estimate_step

    g = json.load(open(path))
    entry = next(e for e in zoo.list_zoo() if e["id"] == g["id"])
    model, inputs, targets, loss_fn = zoo.build(entry)
    opt_fn, ac = zoo.case_args(g["case"])
    est = estimate_step(model, inputs, loss_fn=loss_fn, targets=targets, optimizer=opt_fn, autocast_dtype=ac,
                        op_log=True)
    gops = [o for o in g["ops"] if o[0] != "<step>"]
    eops = est["op_log"]
    sm = difflib.SequenceMatcher(a=[o[0] for o in gops], b=[o[0] for o in eops], autojunk=False)
    last = 0
    print(f"gpu peak {max(o[1] + o[2] for o in g['ops']) / 2**20:.2f} MiB, estimate peak "
          f"{est['peak_allocated_bytes'] / 2**20:.2f} MiB")
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag != "equal":
            print(f"  {tag}: gpu {[o[0] for o in gops[i1:i2]][:8]} estimate {[o[0] for o in eops[j1:j2]][:8]}")
            continue
        for k in range(i2 - i1):
            gd, ed = gops[i1 + k][1], eops[j1 + k][1]
            drift = gd - ed
            if abs(drift - last) > threshold or gops[i1 + k][2] > threshold:
                print(f"  op {i1 + k:5d} {gops[i1 + k][0]:40s} gpu {gd / 2**20:9.2f} est {ed / 2**20:9.2f} "
                      f"drift {(drift - last) / 2**20:+8.2f} MiB transient {gops[i1 + k][2] / 2**20:.2f}")
                last = drift


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu-side", nargs=2, metavar=("ID", "CASE"))
    ap.add_argument("--diff")
    ap.add_argument("--threshold", type=float, default=0.25, help="MiB")
    a = ap.parse_args()
    if a.gpu_side:
        gpu_side(*a.gpu_side)
    else:
        diff(a.diff, a.threshold * 2**20)
