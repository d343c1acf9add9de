"""Shared by test_estimate_zoo_1.py and _2.py (two halves of one sample, each well within CI's 300 s a test):
estimate_step on the CPU against PyTorch's peaks measured on the GPU (bench/results/zoo_h200_2026-11-27/
truth.jsonl, bench/zoo_truth.py on an H200, PyTorch 2.11): a sample of the zoo taken by rule (every 12th measured
model in id order, plus the first of each source the stride missed), both cases (fp32 forward+backward; bf16
autocast, AdamW, cross-entropy). Each case's estimated peak allocated bytes within 10% of the measurement, and at
least 90% of the cases within 3% (the goals of the capture issue). Exit 77 without torch or with another PyTorch
than the one measured."""
import json
import os
import sys

from torch_testlib import REPO, Results, args, need_torch

A = args()
need_torch()

import torch  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "bench"))
import zoo  # noqa: E402

from memplan_torch import estimate_step  # noqa: E402

TRUTH = os.path.join(REPO, "bench", "results", "zoo_h200_2026-11-27", "truth.jsonl")
STRIDE = 14


def load_truth():
    rows = {}
    for line in open(TRUTH):
        r = json.loads(line)
        if r.get("ok"):
            rows[(r["id"], r["case"])] = r
    return rows


def sample(truth):
    ids = sorted({i for i, _ in truth if all((i, c) in truth for c in zoo.CASES)})
    picked = ids[::STRIDE]
    for source in sorted({i.split("/")[0] for i in ids}):
        if not any(p.split("/")[0] == source for p in picked):
            picked.append(next(i for i in ids if i.split("/")[0] == source))
    return picked


def main(shard, shards):
    truth = load_truth()
    measured_torch = next(iter(truth.values()))["torch"].split("+")[0]
    if torch.__version__.split("+")[0] != measured_torch:
        print(f"skip: the measurements were made with PyTorch {measured_torch}, this is {torch.__version__}")
        sys.exit(77)
    entries = {e["id"]: e for e in zoo.list_zoo()}
    picked = [i for i in sample(truth) if i in entries][shard::shards]
    errors = []

    def one(entry_id, case):
        torch.manual_seed(0)
        model, inputs, targets, loss_fn = zoo.build(entries[entry_id])
        opt, ac = zoo.case_args(case)
        est = estimate_step(model, inputs, loss_fn=loss_fn, targets=targets, optimizer=opt, autocast_dtype=ac)
        t = truth[(entry_id, case)]
        err = est["peak_allocated_bytes"] / t["peak_allocated_bytes"] - 1
        errors.append(abs(err))
        print(f"     {entry_id} {case}: estimated {est['peak_allocated_bytes'] / 2**20:.1f} MiB, measured "
              f"{t['peak_allocated_bytes'] / 2**20:.1f} MiB ({100 * err:+.2f}%)")
        assert abs(err) <= 0.10, f"{100 * err:+.2f}% off the measured peak"

    def goal():
        within = sum(e <= 0.03 for e in errors)
        assert len(errors) >= 20, f"only {len(errors)} cases estimated"
        assert within >= 0.9 * len(errors), f"{within} of {len(errors)} cases within 3%"

    R = Results()
    for i in picked:
        for c in zoo.CASES:
            R.run(f"{i} {c} within 10% of the H200's measured peak", one, i, c)
    R.run(f"at least 90% of the {2 * len(picked)} cases within 3%", goal)
    sys.exit(R.finish())
