#!/usr/bin/env python3
"""Drives `memplan viz` and `memplan graph` on sample models and checks the SVGs as XML against the plans.

For each model: the plan `memplan analyze --save-plan` writes is drawn with `memplan viz --plan` and planned
afresh by `memplan viz`; both SVGs must parse, hold one rectangle per buffer whose data attributes match
the plan, never draw two buffers live at one step on top of each other, and label the live peak with the op
that the plan (recomputed here from its buffers) peaks at, its name whole or cut to a tail no other op has. Training timelines are checked against the
rectangles they draw. Exit 77 when the command or the samples are missing.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

from viz_testlib import check, cli_args, failures, plan_usage, run, scratch_regions

SVG = "{http://www.w3.org/2000/svg}"
INFERENCE_MODELS = ["tiny_mlp.onnx", "tiny_cnn.onnx", "tiny_gpt.onnx", "squeezenet1_1.onnx", "mobilenet_v2.onnx", "resnet18.onnx"]
TRAINING_MODELS = [("tiny_mlp.onnx", []), ("tiny_cnn.onnx", []), ("resnet18.train.onnx", ["--dim", "batch=4"])]


def buffer_rects(panel):
    out = []
    for r in panel.iter(SVG + "rect"):
        if "data-buffer" in r.attrib:
            a = r.attrib
            out.append({"id": int(a["data-buffer"]), "first": int(a["data-first"]), "last": int(a["data-last"]),
                        "offset": int(a["data-offset"]), "size": int(a["data-size"]), "kind": a.get("data-kind"),
                        "x": float(a["x"]), "y": float(a["y"]), "w": float(a["width"]), "h": float(a["height"])})
    return out


def check_no_overlap(rects, name):
    """Sweep over steps: rectangles of buffers live at a common step must be apart in x or y."""
    eps = 1e-3
    rects = sorted(rects, key=lambda r: (r["first"], r["id"]))
    active = []
    bad = 0
    for r in rects:
        active = [a for a in active if a["last"] >= r["first"]]
        for a in active:
            x_apart = a["x"] + a["w"] <= r["x"] + eps or r["x"] + r["w"] <= a["x"] + eps
            y_apart = a["y"] + a["h"] <= r["y"] + eps or r["y"] + r["h"] <= a["y"] + eps
            if not (x_apart or y_apart):
                bad += 1
        active.append(r)
    check(bad == 0, f"{name}: {bad} pairs of buffers live at one step overlap on the picture")


def check_panel_against_plan(panel, plan, name):
    rects = buffer_rects(panel)
    nbuf = len(plan["buffers"])
    regions = plan["buffers"] + scratch_regions(plan)  # rects number scratch regions after the buffers
    check(int(panel.get("data-buffers")) == nbuf, f"{name}: panel says {panel.get('data-buffers')} buffers, plan has {nbuf}")
    check(int(panel.get("data-scratch")) == len(regions) - nbuf, f"{name}: panel's scratch count differs from the plan's")
    aggregated = int(panel.get("data-aggregated"))
    check(len(rects) + aggregated == len(regions),
          f"{name}: {len(rects)} rects + {aggregated} aggregated != {len(regions)} buffers and scratch regions")
    if aggregated == 0:
        check(sorted(r["id"] for r in rects) == list(range(len(regions))), f"{name}: not exactly one rect per buffer")
    for r in rects:
        b = regions[r["id"]]
        if r["id"] >= nbuf and r["kind"] != "scratch":
            check(False, f"{name}: scratch region {r['id'] - nbuf} drawn as {r['kind']}")
        if not check((r["first"], r["last"], r["offset"], r["size"]) == (b["first"], b["last"], b["offset"], b["size"]),
                     f"{name}: rect of buffer {r['id']} does not match the plan"):
            break
    check_no_overlap(rects, name)
    _, peak_step, peak_bytes = plan_usage(plan)
    labels = [t for t in panel.iter(SVG + "text") if t.get("class") == "live-peak-label"]
    if check(len(labels) == 1, f"{name}: {len(labels)} live peak labels"):
        peak_op = plan["schedule"][peak_step]
        check(labels[0].get("data-op") == peak_op, f"{name}: peak label names {labels[0].get('data-op')!r}, the plan peaks at {peak_op!r}")
        check(int(labels[0].get("data-step")) == peak_step, f"{name}: peak step {labels[0].get('data-step')} != {peak_step}")
        check(int(labels[0].get("data-bytes")) == peak_bytes, f"{name}: peak bytes differ")
        check(peak_op[-12:] in "".join(labels[0].itertext()), f"{name}: the peak label's text does not show the op")
        # Names are never cut into ambiguity: a shortened op name is a tail that only the peak op's name ends with.
        lines = list(labels[0].itertext())
        check(lines[0].startswith("live peak "), f"{name}: the label says {lines[0]!r}, not 'live peak ...'")
        shown = lines[-1]
        if shown.startswith("\u2026"):
            tail = shown[1:shown.rindex(" (")]
            owners = [op for op in set(plan["schedule"]) if op.endswith(tail)]
            check(owners == [peak_op], f"{name}: the shortened name {shown!r} fits {len(owners)} ops: {owners[:3]}")
        else:
            check(shown.startswith(peak_op + " ("), f"{name}: the label shows {shown!r}, not the whole name {peak_op!r}")


def panels_of(path):
    root = ET.parse(path).getroot()  # raises on malformed XML
    check(root.tag == SVG + "svg", f"{path}: root is {root.tag}")
    return [g for g in root.iter(SVG + "g") if g.get("class") == "panel"]


def inference_checks(memplan, samples, tmp):
    for m in INFERENCE_MODELS:
        model = os.path.join(samples, "models", m)
        plan_file = os.path.join(tmp, m + ".plan.json")
        run(memplan, "analyze", model, "--save-plan", plan_file)
        with open(plan_file) as f:
            plan = json.load(f)
        for how, extra in (("fresh", []), ("from --plan", ["--plan", plan_file])):
            svg = os.path.join(tmp, f"{m}.{len(extra)}.svg")
            run(memplan, "viz", model, *extra, "-o", svg)
            panels = panels_of(svg)
            if check(len(panels) == 1, f"{m} {how}: {len(panels)} panels"):
                check_panel_against_plan(panels[0], plan, f"{m} ({how})")
        print(f"ok   {m}: {len(plan['buffers'])} buffers, {os.path.getsize(svg)} bytes of SVG")
    # A saved plan drawn against another model, or the same model at other dims, is refused (exit 10).
    first = os.path.join(tmp, INFERENCE_MODELS[0] + ".plan.json")
    for other in INFERENCE_MODELS[1:]:
        r = subprocess.run([memplan, "viz", os.path.join(samples, "models", other), "--plan", first, "-o",
                            os.path.join(tmp, "mismatch.svg")], capture_output=True, text=True)
        check(r.returncode == 10 and "does not match model" in r.stderr,
              f"viz {other} --plan <plan of {INFERENCE_MODELS[0]}>: exit {r.returncode}, {r.stderr.strip()[:200]}")


def training_checks(memplan, samples, tmp):
    for m, dims in TRAINING_MODELS:
        model = os.path.join(samples, "models", m)
        svg = os.path.join(tmp, m + ".train.svg")
        try:
            run(memplan, "viz", model, *dims, "--train", "--strategy", "none", "--compare", "sqrt", "-o", svg)
        except RuntimeError as e:
            check(False, f"{m}: training timeline failed: {e}")
            continue
        panels = panels_of(svg)
        check(len(panels) == 2, f"{m}: --compare drew {len(panels)} panels")
        for k, p in enumerate(panels):
            rects = buffer_rects(p)
            name = f"{m} training panel {k + 1}"
            regions = int(p.get("data-buffers")) + int(p.get("data-scratch"))
            check(int(p.get("data-aggregated")) > 0 or len(rects) == regions, f"{name}: rect count")
            check_no_overlap(rects, name)
            steps = int(p.get("data-steps"))
            # Rebuild the plan from the rectangles: the peak the label names must be the drawn peak.
            pseudo = {"schedule": [str(s) for s in range(steps)], "buffers": rects}
            _, peak_step, peak_bytes = plan_usage(pseudo)
            if int(p.get("data-aggregated")) == 0:
                check(int(p.get("data-live-peak-step")) == peak_step and int(p.get("data-live-peak-bytes")) == peak_bytes,
                      f"{name}: live peak {p.get('data-live-peak-step')}/{p.get('data-live-peak-bytes')} != drawn {peak_step}/{peak_bytes}")
            kinds = {r.get("data-kind") for r in p.iter(SVG + "rect") if r.get("data-kind")}
            check("gradient" in kinds, f"{name}: no gradient buffers drawn ({sorted(kinds)})")
            if k == 1:
                check("recomputed" in kinds, f"{name}: sqrt strategy drew no recomputed buffers")
        phases = {r.get("data-phase") for r in ET.parse(svg).getroot().iter(SVG + "rect") if r.get("data-phase")}
        check({"forward", "backward"} <= phases, f"{m}: forward/backward halves not shaded ({phases})")
        print(f"ok   {m} training none vs sqrt: {os.path.getsize(svg)} bytes of SVG")


def graph_checks(memplan, samples, tmp):
    for m in ["tiny_cnn.onnx", "resnet50.onnx"]:
        model = os.path.join(samples, "models", m)
        plan_file = os.path.join(tmp, m + ".g.plan.json")
        run(memplan, "analyze", model, "--save-plan", plan_file)
        with open(plan_file) as f:
            ops = len(json.load(f)["schedule"])
        for collapse in ([], ["--collapse"]):
            svg = os.path.join(tmp, m + "".join(collapse) + ".graph.svg")
            t0 = time.time()
            run(memplan, "graph", model, *collapse, "-o", svg)
            took = time.time() - t0
            root = ET.parse(svg).getroot()
            nodes = [g for g in root.iter(SVG + "g") if (g.get("class") or "").split()[:1] == ["node"]]
            if collapse:
                check(0 < len(nodes) < ops, f"{m} --collapse: {len(nodes)} nodes for {ops} ops")
            else:
                check(len(nodes) == ops, f"{m}: {len(nodes)} nodes for {ops} ops")
            print(f"ok   graph {m} {' '.join(collapse)}: {len(nodes)} nodes in {took:.2f} s")


def main():
    a = cli_args()
    if a is None:
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        inference_checks(a.memplan, a.samples, tmp)
        training_checks(a.memplan, a.samples, tmp)
        graph_checks(a.memplan, a.samples, tmp)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
