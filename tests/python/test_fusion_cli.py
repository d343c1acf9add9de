#!/usr/bin/env python3
"""Fusion in the commands: on by default, off with --no-fuse, reported in JSON and text, recorded in plans.

On bert_small's training export (batch 2, seq 64) `plan --train --json` runs fused and with --no-fuse; the
assertions hold whichever fusion passes are implemented: both plans are valid, fusing never raises the
peak, every group names >= 1 member and an op that exists in the plan's embedded graph with those members,
the plan file lists the same groups, pytorch_peak_bytes is positive and not below with eager attention than
with SDPA. The CNN samples check that pytorch_peak_bytes equals the eager peak memplan predicted for them
before fusion existed (nothing PyTorch runs as one library kernel applies to them). The other commands
(analyze, fit, run, viz, trace) report fusion and honour --no-fuse. Exit 77 when memplan or the samples are
missing.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

from viz_testlib import check, cli_args, failures, run

# pytorch_peak_bytes of the CNN training exports (strategy none, optimizer sgd), as `eager_peak_bytes` gave
# them before fusion was part of planning (commit 7d6cee6: 256635584 and 334243165), plus the storage that
# PyTorch's 0-dim mse_loss keeps at the output's size from the loss to the end of the step
# (planner/pytorch/eager_model.hpp): [8,1000] and [4,1000] float32, 32000 and 16000 -> 16128 bytes aligned; and
# the cuDNN workspaces PyTorch takes inside its convolutions (planner/pytorch/cudnn_conv.hpp): resnet18's fp32 3x3
# gradients move its peak to a convolution's backward, 36079360 bytes higher; mobilenet_v2's take none in fp32 (its
# depthwise convolutions run PyTorch's own kernels, its stem is strided, the rest are 1x1).
CNN_EAGER_PEAKS = [
    ("resnet18.train.onnx", ["--dim", "batch=8"], 256667584 + 36079360),
    ("mobilenet_v2.train.onnx", ["--dim", "batch=4"], 334259293),
]
BERT = ["--dim", "batch=2", "--dim", "seq=64"]


def run_json(memplan, *args):
    return json.loads(run(memplan, *args, "--json"))


def check_fusion_section(j, enabled, where):
    f = j.get("fusion")
    if not check(isinstance(f, dict), f"{where}: no \"fusion\" object"):
        return
    check(f.get("enabled") is enabled, f"{where}: fusion.enabled is {f.get('enabled')!r}, expected {enabled}")
    groups = f.get("groups", None)
    check(isinstance(groups, list), f"{where}: fusion.groups is not a list")
    groups = groups or []
    if not enabled:
        check(groups == [] and f.get("intermediate_bytes_removed") == 0, f"{where}: --no-fuse still lists groups")
    by_kind = {}
    for g in groups:
        check(set(g) >= {"kind", "op", "members"}, f"{where}: group {g} lacks kind, op or members")
        check(isinstance(g.get("members"), list) and len(g["members"]) >= 1, f"{where}: group {g.get('op')} has no members")
        by_kind[g.get("kind")] = by_kind.get(g.get("kind"), 0) + 1
    check(f.get("by_kind") == by_kind, f"{where}: by_kind {f.get('by_kind')} does not count the groups ({by_kind})")
    check(isinstance(f.get("intermediate_bytes_removed"), int) and f["intermediate_bytes_removed"] >= 0,
          f"{where}: intermediate_bytes_removed missing or negative")


def check_plan_file(plan_path, fusion, where):
    """The plan's embedded graph holds every group's op with its members; fused_groups lists the same."""
    with open(plan_path) as fh:
        plan = json.load(fh)
    ops = {op["name"]: op for op in plan["graph"]["ops"]}
    for g in fusion["groups"]:
        op = ops.get(g["op"])
        if not check(op is not None, f"{where}: fused op {g['op']} is not in the plan's graph"):
            continue
        fused_ops = op.get("attrs", {}).get("fused_ops")
        fused_ops = fused_ops.get("strings") if isinstance(fused_ops, dict) else fused_ops  # {"strings": [...]}
        check(fused_ops == g["members"], f"{where}: op {g['op']} carries fused_ops {fused_ops}, "
                                                     f"the report says {g['members']}")
        check(g["op"] in plan["schedule"], f"{where}: fused op {g['op']} is not scheduled")
    listed = {(e["op"], e["kind"], tuple(e["members"])) for e in plan.get("fused_groups", [])}
    reported = {(g["op"], g["kind"], tuple(g["members"])) for g in fusion["groups"]}
    # The training graph may hold recomputed copies of fused ops too; every reported group is listed.
    check(reported <= listed, f"{where}: plan fused_groups {sorted(listed)[:3]}... lack reported groups")
    if not fusion["groups"]:
        check("fused_groups" not in plan, f"{where}: a plan without fused ops has a fused_groups section")
    return plan


def bert_checks(memplan, samples, tmp):
    model = os.path.join(samples, "transformers", "bert_small.train.onnx")
    if not os.path.exists(model):
        print("skip bert_small: sample missing")
        return
    fused_plan, plain_plan = os.path.join(tmp, "bert.fused.json"), os.path.join(tmp, "bert.plain.json")
    fused = run_json(memplan, "plan", model, "--train", *BERT, "--save-plan", fused_plan)
    plain = run_json(memplan, "plan", model, "--train", *BERT, "--no-fuse", "--save-plan", plain_plan)
    for j, name in ((fused, "bert fused"), (plain, "bert --no-fuse")):
        check(j["plan_valid"] is True, f"{name}: plan not valid")
        check(isinstance(j.get("pytorch_peak_bytes"), int) and j["pytorch_peak_bytes"] > 0, f"{name}: pytorch_peak_bytes missing")
        check(j.get("pytorch_attention") == "auto", f"{name}: pytorch_attention is {j.get('pytorch_attention')!r}, default auto")
    check_fusion_section(fused, True, "bert fused")
    check_fusion_section(plain, False, "bert --no-fuse")
    check(len(fused["fusion"]["groups"]) >= 1, "bert fused: nothing fused (elementwise chains at least)")
    check(fused["peak_bytes"] <= plain["peak_bytes"], f"bert: fused peak {fused['peak_bytes']} > unfused {plain['peak_bytes']}")
    check(fused["ops"] < plain["ops"], f"bert: fused training graph has {fused['ops']} ops, unfused {plain['ops']}")
    check(fused["pytorch_peak_bytes"] == plain["pytorch_peak_bytes"], "bert: pytorch_peak_bytes depends on --no-fuse")
    check_plan_file(fused_plan, fused["fusion"], "bert fused plan")
    check_plan_file(plain_plan, plain["fusion"], "bert unfused plan")
    eager = run_json(memplan, "plan", model, "--train", *BERT, "--pytorch-attention", "eager")
    check(eager.get("pytorch_attention") == "eager", "bert: --pytorch-attention eager not reported")
    check(eager["pytorch_peak_bytes"] >= fused["pytorch_peak_bytes"],
          f"bert: eager attention predicts {eager['pytorch_peak_bytes']} < SDPA {fused['pytorch_peak_bytes']}")
    check(eager["peak_bytes"] == fused["peak_bytes"], "bert: --pytorch-attention changed memplan's own plan")
    # bert_small is exported with eager attention (scores divided by sqrt(d)): auto predicts it as eager, and
    # --pytorch-attention sdpa (every attention one kernel) lower
    sdpa = run_json(memplan, "plan", model, "--train", *BERT, "--pytorch-attention", "sdpa")
    check(sdpa.get("pytorch_attention") == "sdpa", "bert: --pytorch-attention sdpa not reported")
    check(fused["pytorch_peak_bytes"] == eager["pytorch_peak_bytes"] > sdpa["pytorch_peak_bytes"],
          f"bert: auto {fused['pytorch_peak_bytes']}, eager {eager['pytorch_peak_bytes']}, sdpa {sdpa['pytorch_peak_bytes']}")
    text = run(memplan, "plan", model, "--train", *BERT)
    check("PyTorch eager (SDPA or eager as exported attention, fp32, optimizer sgd foreach) would peak at" in text,
          "bert text: no PyTorch line")
    check(any(l.startswith("fused ") and "groups" in l for l in text.splitlines()), "bert text: no fused line")
    text = run(memplan, "plan", model, "--train", *BERT, "--pytorch-attention", "eager", "--no-fuse")
    check("PyTorch eager (eager attention, fp32, optimizer sgd foreach) would peak at" in text, "bert text: no PyTorch eager-attention line")
    check("off (--no-fuse)" in text, "bert text --no-fuse: fusion not reported off")
    r = subprocess.run([memplan, "plan", model, "--train", *BERT, "--pytorch-attention", "flash"], capture_output=True, text=True)
    check(r.returncode != 0 and "--pytorch-attention" in r.stderr, "bert: a bad --pytorch-attention is not refused")
    # The timeline names fused ops by kind and member count in its tooltips.
    svg = os.path.join(tmp, "bert.svg")
    run(memplan, "viz", model, "--train", *BERT, "-o", svg)
    with open(svg, encoding="utf-8") as fh:
        labels = set(re.findall(r"made by [^<&]* \(([^,()]+), ([a-z_]+) \u00d7(\d+)\)", fh.read()))
    kinds = {g["kind"] for g in fused["fusion"]["groups"]}
    check(labels and {k for _, k, _ in labels} <= kinds, f"bert timeline: fused labels {sorted(labels)[:3]} vs kinds {kinds}")
    trace = os.path.join(tmp, "bert.trace.json")
    run(memplan, "trace", model, "--train", *BERT, "--plan", fused_plan, "-o", trace)
    with open(trace) as fh:
        spans = [e for e in json.load(fh)["traceEvents"] if e["ph"] == "X"]
    fused_spans = [e for e in spans if "members" in e["args"]]
    check(len(fused_spans) >= len(fused["fusion"]["groups"]), "bert trace: fewer fused spans than groups")
    for e in fused_spans:
        check(f"{e['args']['fused']} \u00d7{len(e['args']['members'])}" in e["name"], f"bert trace: span {e['name']} lacks kind and count")


def cnn_checks(memplan, samples):
    for model, dims, want in CNN_EAGER_PEAKS:
        path = os.path.join(samples, "models", model)
        fused = run_json(memplan, "plan", path, "--train", *dims, "--pytorch-outputs", "freed")
        held = run_json(memplan, "plan", path, "--train", *dims)
        # eager_peak_bytes replays the plan's own order: the file order here, the order PyTorch runs
        plain = run_json(memplan, "plan", path, "--train", *dims, "--no-fuse", "--schedule", "file")
        got = fused["pytorch_peak_bytes"] - fused["pytorch_workspace_bytes"]
        # the loop's output ([batch, 1000] float32) held to the end of the step by default
        out = int(dims[1].split("=")[1]) * 1000 * 4
        check(0 < held["pytorch_peak_bytes"] - fused["pytorch_peak_bytes"] <= 2 * (-(-out // 256) * 256),
              f"{model}: held output adds {held['pytorch_peak_bytes'] - fused['pytorch_peak_bytes']}")
        check(fused["pytorch_workspace_bytes"] == 65 << 20, f"{model}: pytorch_workspace_bytes {fused['pytorch_workspace_bytes']}")
        check(got == want, f"{model}: pytorch_peak_bytes less workspaces {got} != {want}")
        check(plain["eager_peak_bytes"] == want, f"{model}: --no-fuse eager_peak_bytes {plain['eager_peak_bytes']} != {want}")
        # No peak comparison here: FusedElementwise's backward rule saves its group's inputs, so Add+Relu
        # fused saves both Add inputs where Relu alone saved its output (resnet18 b8: +26 MB).
        check_fusion_section(fused, True, model)


def command_checks(memplan, samples, tmp):
    mlp = os.path.join(samples, "models", "tiny_mlp.onnx")
    cnn = os.path.join(samples, "models", "tiny_cnn.onnx")
    for model in (mlp, cnn):
        name = os.path.basename(model)
        a, b = run_json(memplan, "analyze", model), run_json(memplan, "analyze", model, "--no-fuse")
        check_fusion_section(a, True, f"analyze {name}")
        check_fusion_section(b, False, f"analyze {name} --no-fuse")
        check(a["ops"] + sum(len(g["members"]) - 1 for g in a["fusion"]["groups"]) == b["ops"],
              f"analyze {name}: fused op count is not the unfused count less the members folded away")
        text = run(memplan, "analyze", model)
        check(any(l.startswith("fused ") for l in text.splitlines()), f"analyze {name}: no fused line")
    # fit varies a symbolic dim: tiny_cnn's batch is fixed, resnet18's training export has a symbolic one.
    rn18 = os.path.join(samples, "models", "resnet18.train.onnx")
    fit = run_json(memplan, "fit", rn18, "--budget", "1GiB", "--strategies", "none", "--max-value", "8")
    check_fusion_section(fit, True, "fit resnet18")
    fit = run_json(memplan, "fit", rn18, "--budget", "1GiB", "--strategies", "none", "--max-value", "8", "--no-fuse")
    check_fusion_section(fit, False, "fit resnet18 --no-fuse")
    inp = os.path.join(samples, "models", "tiny_cnn.input.npy")
    if os.path.exists(inp):
        r = run_json(memplan, "run", cnn, "--input", inp)
        check_fusion_section(r, True, "run tiny_cnn")
        r = run_json(memplan, "run", cnn, "--input", inp, "--no-fuse")
        check_fusion_section(r, False, "run tiny_cnn --no-fuse")
    svg = os.path.join(tmp, "cnn.svg")
    out = run(memplan, "viz", cnn, "--train", "-o", svg)
    check("fused " in out, "viz: no fused line")
    out = run(memplan, "viz", cnn, "--train", "--no-fuse", "-o", svg)
    check("off (--no-fuse)" in out, "viz --no-fuse: fusion not reported off")
    # A saved plan of the fused graph does not fit the unfused model, and says so.
    plan = os.path.join(tmp, "cnn.plan.json")
    run(memplan, "analyze", cnn, "--save-plan", plan)
    with open(plan) as fh:
        doc = json.load(fh)
    if doc.get("fused_groups") and os.path.exists(inp):
        r = subprocess.run([memplan, "run", cnn, "--input", inp, "--no-fuse", "--plan", plan], capture_output=True, text=True)
        check(r.returncode != 0, "run --no-fuse accepted a plan of the fused graph")
        r = subprocess.run([memplan, "run", cnn, "--input", inp, "--plan", plan], capture_output=True, text=True)
        check(r.returncode == 0, f"run refused its own fused plan: {r.stderr.strip()}")
        doc["fused_groups"][0]["members"] = doc["fused_groups"][0]["members"][:-1] or ["nothing"]
        bad = os.path.join(tmp, "cnn.bad.json")
        with open(bad, "w") as fh:
            json.dump(doc, fh)
        r = subprocess.run([memplan, "run", cnn, "--input", inp, "--plan", bad], capture_output=True, text=True)
        check(r.returncode != 0 and "fused group" in r.stderr, f"run accepted a plan whose fused_groups differ: {r.stderr.strip()}")


def main():
    a = cli_args()
    if a is None:
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        bert_checks(a.memplan, a.samples, tmp)
        cnn_checks(a.memplan, a.samples)
        command_checks(a.memplan, a.samples, tmp)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
