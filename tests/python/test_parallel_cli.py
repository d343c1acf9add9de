#!/usr/bin/env python3
"""Drives `memplan fit --max-gpus`, `plan --gpus --save-plan` and `viz` per rank on a tiny GPT-2-style model with a symbolic
batch (written by bench/multi_gpu_plans.py's builder): the chosen GPU count is the least with a fitting candidate,
fitting candidates' plans are valid and within the budget, the chosen layout is the fastest fitting one of its count,
a tighter budget never takes fewer GPUs, nothing fitting exits 9 naming the least peak, and a rank-plans file draws
one timeline panel per rank role. Exit 77 when the command, onnx or the bench builder are missing.
"""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

from viz_testlib import check, cli_args, failures

SVG = "{http://www.w3.org/2000/svg}"
BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
# Greedy packing only: the exact packer's time buys nothing these checks need.
FAST = ["--packer", "greedy_by_size", "--exact-pack-seconds", "0", "--library-bytes", "0"]


def memplan(exe, *args):
    return subprocess.run([exe, *args], capture_output=True, text=True)


def fit(exe, model, budget, gpus):
    r = memplan(exe, "fit", model, "--train", "--dim", "batch=8", "--optimizer", "adam", "--loss", "ce", "--max-gpus", str(gpus),
                "--budget", budget, "--json", *FAST)
    return r.returncode, (json.loads(r.stdout) if r.stdout.strip() else None), r.stderr


def fit_checks(exe, model):
    results = {}
    for budget in ("2.5MiB", "2MiB"):
        rc, j, err = fit(exe, model, budget, 4)
        if not check(rc == 0 and j is not None, f"fit --budget {budget}: exit {rc} {err.strip()[-300:]}"):
            continue
        results[budget] = j
        n = j["gpus"]
        check(j["fits"] and n == j["chosen"]["gpus"], f"{budget}: chosen GPU count {n}")
        check(j["budget_bytes"] > 0 and len(j["candidates"]) >= 1, f"{budget}: candidates listed")
        fitting = [c for c in j["candidates"] if c["fits"]]
        check(min(c["gpus"] for c in fitting) == n, f"{budget}: {n} is the least GPU count with a fitting candidate")
        check(all(c["gpus"] <= n for c in j["candidates"]), f"{budget}: no larger count searched")
        for c in fitting:
            check(c["plan_valid"] and c["total_device_bytes"] <= j["budget_bytes"], f"{budget}: {c['name']} M{c['microbatches']} fits: valid, within budget")
        same = [c for c in fitting if c["gpus"] == n]
        check(j["chosen"]["estimated_step_seconds"] == min(c["estimated_step_seconds"] for c in same), f"{budget}: the fastest fitting layout of {n} GPUs")
        for c in j["candidates"]:
            check(c["data_parallel"] * c["microbatches"] * c["microbatch"] == 8, f"{budget}: {c['name']} splits the 8 samples")
        ranks = j["chosen"]["ranks"]
        check(all(r["plan_valid"] and r["peak_bytes"] <= j["budget_bytes"] for r in ranks), f"{budget}: the chosen layout's rank plans")
        print(f"ok   fit --budget {budget}: {n} GPU(s), {j['chosen']['name']}, {j['planned_layouts']} planned")
    if len(results) == 2:
        check(results["2MiB"]["gpus"] >= results["2.5MiB"]["gpus"], "a tighter budget never gives fewer GPUs")
        check(results["2MiB"]["gpus"] > 1, "2 MiB needs more than one GPU")

    # Nothing fits: exit 9 (infeasible), the candidates still printed, the least per-GPU peak named.
    rc, j, err = fit(exe, model, "1MiB", 1)
    check(rc == 9, f"infeasible fit exits 9, got {rc}")
    check("least per-GPU peak found" in err and "dp1 zero0 tp1 pp1" in err, f"the message names the least peak: {err.strip()}")
    check(j is not None and j["chosen"] is None and not j["fits"] and j["least"]["peak_bytes"] > 1 << 20, "JSON: no choice, the least candidate")

    # Usage errors exit 2.
    r = memplan(exe, "fit", model, "--train", "--dim", "batch=8", "--max-gpus", "2", "--budget", "2MiB", "--microbatches", "2")
    check(r.returncode == 2, f"--microbatches with --max-gpus: exit {r.returncode}")
    r = memplan(exe, "fit", model, "--train", "--max-gpus", "2", "--budget", "2MiB")
    check(r.returncode == 2 and "samples per step" in r.stderr, f"no global batch: exit {r.returncode} {r.stderr.strip()}")


def rank_viz_checks(exe, model, tmp):
    plans = os.path.join(tmp, "ranks.json")
    r = memplan(exe, "plan", model, "--train", "--dim", "batch=2", "--loss", "ce", "--gpus", "4", "--tp", "2", "--pp", "2", "--microbatches", "2",
                "--save-plan", plans, *FAST)
    check(r.returncode == 0, f"plan --gpus --save-plan: {r.stderr.strip()}")
    role_lines = [l for l in r.stdout.splitlines() if l.startswith("rank role:")]
    check(len(role_lines) == 2 and all("tp ranks 0-1 of 2" in l and "data parallel" not in l for l in role_lines),
          f"tensor-parallel roles are named as such: {role_lines}")
    doc = json.load(open(plans))
    roles = [p["role"] for p in doc["plans"]]
    check(roles == ["stage 0 of 2, tp ranks 0-1 of 2", "stage 1 of 2, tp ranks 0-1 of 2"], f"roles {roles}")
    for src, args in (("file", ["--plan", plans]), ("model", [model, "--train", "--dim", "batch=2", "--loss", "ce", "--gpus", "4", "--tp", "2", "--pp", "2",
                                                               "--microbatches", "2", *FAST])):
        svg = os.path.join(tmp, src + ".svg")
        r = memplan(exe, "viz", *args, "-o", svg)
        if not check(r.returncode == 0, f"viz per rank ({src}): {r.stderr.strip()}"):
            continue
        root = ET.parse(svg).getroot()
        panels = [g for g in root.iter(SVG + "g") if g.get("class") == "panel"]
        check(root.get("data-panels") == "2" and len(panels) == 2, f"{src}: one panel per rank role, got {len(panels)}")
        titles = [p.get("data-title") for p in panels]
        check(titles == ["ranks 0,1 \u00b7 stage 0 of 2, tp ranks 0-1 of 2", "ranks 2,3 \u00b7 stage 1 of 2, tp ranks 0-1 of 2"], f"{src}: titles {titles}")
        for p, plan in zip(panels, doc["plans"]):
            notes = " ".join(t.text or "" for t in p.iter(SVG + "text") if t.get("class") == "note")
            check("peak" in notes and "model state" in notes, f"{src}: panel notes state peak and model state: {notes}")
            check(int(p.get("data-buffers")) == len(plan["buffers"]), f"{src}: panel buffers match the role's plan")
        print(f"ok   viz per rank ({src}): {len(panels)} panels")


def main():
    a = cli_args()
    if a is None:
        return 77
    try:
        sys.path.insert(0, BENCH)
        import multi_gpu_plans
    except ImportError as e:
        print("skip:", e)
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "tiny_gpt2.onnx")
        multi_gpu_plans.build("gpt2", "batch", 32, model, dict(V=512, D=64, H=4, L=2, F=256, KV=4))
        fit_checks(a.memplan, model)
        rank_viz_checks(a.memplan, model, tmp)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
