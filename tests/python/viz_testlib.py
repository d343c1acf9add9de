"""Helpers shared by the viz and fusion tests (test_viz_svg.py, test_viz_trace.py, test_fusion_cli.py): checks, running memplan, plan usage."""
import argparse
import os
import subprocess

failures = []


def check(cond, what):
    """Records a failed property (and prints it) without stopping the run; returns cond."""
    if not cond:
        failures.append(what)
        print("FAIL:", what)
    return cond


def cli_args():
    """--memplan and --samples from the command line; None (the caller exits 77: skip) when either is missing."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=True)
    a = ap.parse_args()
    if not os.path.exists(a.memplan) or not os.path.isdir(os.path.join(a.samples, "models")):
        print("skip: memplan or samples missing")
        return None
    return a


def run(memplan, *args):
    r = subprocess.run([memplan, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"memplan {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def scratch_regions(plan):
    """The plan's scratch regions as buffer-like dicts live at their op's step (schema version 2)."""
    step = {op: s for s, op in enumerate(plan["schedule"])}
    return [{"first": step[sc["op"]], "last": step[sc["op"]], "offset": sc["offset"], "size": sc["bytes"]}
            for sc in plan.get("scratch", [])]


def plan_usage(plan):
    """Live bytes per step, the first peak step and the peak bytes, from a plan's buffers and scratch alone."""
    n = len(plan["schedule"])
    delta = [0] * (n + 1)
    for b in plan["buffers"] + scratch_regions(plan):
        delta[b["first"]] += b["size"]
        delta[b["last"] + 1] -= b["size"]
    acc, best, best_step, per_step = 0, -1, 0, []
    for s in range(n):
        acc += delta[s]
        per_step.append(acc)
        if acc > best:
            best, best_step = acc, s
    return per_step, best_step, best
