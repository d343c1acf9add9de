"""memplan_torch.export_graph over the zoo: each model captured with torch.export in training mode, the batch (and
the sequence of language models) asked dynamic, written as memplan's JSON graph, then planned by
`memplan plan PATH --train --loss ce --dim ...` at the zoo's sizes. One row per model: captured or not (and
why), which dims stayed dynamic, what was planned at the example's sizes, whether memplan planned it.

    .venv2/bin/python bench/zoo_capture.py --cases capture --jobs 1 --out capture.jsonl [--ids FILE]
    .venv2/bin/python bench/zoo_capture.py --report capture.jsonl > bench/results/zoo_capture_DATE.md
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.environ.get("MEMPLAN_PY", os.path.join(ROOT, "python")))

MEMPLAN = os.environ.get("MEMPLAN_BIN", os.path.join(ROOT, "build", "memplan"))
PLAN_TIMEOUT = 240


def _first_line(e):
    s = str(e).strip()
    for line in s.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def _dynamic_dims(entry, inputs):
    """The batch of every tensor input (dim 0); the sequence (dim 1) of a language model's token ids."""
    import torch

    lm = entry["task"] in ("causal_lm", "masked_lm")
    dims = {}
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.dim() >= 1:
            d = {0: "batch"}
            if lm and x.dim() >= 2:
                d[1] = "seq"
            dims[i] = d
    return dims


def _plan(path, binds):
    import json
    import subprocess

    cmd = [MEMPLAN, "plan", path, "--train", "--loss", "ce", "--json"]
    for k, v in binds.items():
        cmd += ["--dim", f"{k}={v}"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=PLAN_TIMEOUT)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout or "").strip().splitlines()
        return False, f"memplan exit {p.returncode}: {(tail[-1] if tail else '')[:300]}", None
    try:
        out = json.loads(p.stdout)
    except ValueError:
        return True, None, None
    peak = None
    for key in ("peak_bytes", "arena_bytes", "total_bytes"):
        if isinstance(out, dict) and isinstance(out.get(key), (int, float)):
            peak = out[key]
            break
    return True, None, peak


def run_one(entry, cases):
    import tempfile
    import warnings

    import torch

    import zoo
    from memplan_torch import export_graph

    rows = []
    for case in cases:
        r = {"id": entry["id"], "case": case, "torch": torch.__version__, "captured": False, "planned": False}
        t0 = time.time()
        try:
            torch.manual_seed(0)
            model, inputs, targets, loss_fn = zoo.build(entry)
        except Exception as e:  # noqa: BLE001 - recorded per entry
            r.update(ok=False, stage="build", error=f"{type(e).__name__}: {_first_line(e)}")
            rows.append(r)
            continue
        sizes = {}
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor):
                sizes.setdefault("batch", int(x.shape[0]))
                if entry["task"] in ("causal_lm", "masked_lm") and x.dim() >= 2:
                    sizes.setdefault("seq", int(x.shape[1]))
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "graph.json")
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    doc = export_graph(model, inputs, path, train=True, dynamic_dims=_dynamic_dims(entry, inputs))
                cap = doc.get("captured", {}) if isinstance(doc, dict) else {}
                r["captured"] = True
                r["dynamic"] = cap.get("dynamic", [])
                r["specialized"] = cap.get("specialized", [])
                r["approximated"] = cap.get("approximated", [])
                r["n_ops"] = len(doc.get("ops", []))
                r["warnings"] = sorted({_first_line(w.message) for w in caught
                                        if "memplan" in str(w.message)})[:5]
            except Exception as e:  # noqa: BLE001 - recorded per entry
                r.update(ok=False, stage="capture", error=f"{type(e).__name__}: {_first_line(e)}")
                r["seconds"] = round(time.time() - t0, 2)
                rows.append(r)
                continue
            r["capture_seconds"] = round(time.time() - t0, 2)
            binds = {k: v for k, v in sizes.items() if k in set(r["dynamic"]) or "captured" not in doc}
            try:
                ok, err, peak = _plan(path, binds)
            except Exception as e:  # noqa: BLE001 - a hung plan is this entry's
                ok, err, peak = False, f"{type(e).__name__}: {_first_line(e)}", None
            r["planned"] = ok
            r["ok"] = ok
            if peak is not None:
                r["plan_peak_bytes"] = peak
            if err:
                r["stage"] = "plan"
                r["error"] = err
        r["seconds"] = round(time.time() - t0, 2)
        rows.append(r)
    return rows


def report(path):
    """The results table (markdown) of a --out file."""
    import json
    from collections import Counter

    rows = [json.loads(line) for line in open(path) if line.strip()]
    n = len(rows)
    cap = sum(1 for r in rows if r.get("captured"))
    plan = sum(1 for r in rows if r.get("planned"))
    built = sum(1 for r in rows if r.get("stage") != "build" and not str(r.get("error", "")).startswith("process"))
    classes = Counter()
    for r in rows:
        if not r.get("planned"):
            classes[f"{r.get('stage', '?')}: {_error_class(r.get('error', ''))}"] += 1
    out = [f"{n} zoo entries: {cap} captured ({100 * cap / max(n, 1):.1f}%), {plan} planned "
           f"({100 * plan / max(n, 1):.1f}%); {n - built} did not build in the zoo or crashed the process.", "",
           "| failure class | count |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in classes.most_common()]
    out += ["", "| model | captured | planned | dynamic | specialized | approximated | reason |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: r["id"]):
        reason = (r.get("error") or "; ".join(r.get("warnings", [])) or "").replace("|", "\\|")[:200]
        out.append(f"| {r['id']} | {'yes' if r.get('captured') else 'no'} | {'yes' if r.get('planned') else 'no'} | "
                   f"{','.join(r.get('dynamic', []))} | {','.join(r.get('specialized', []))} | "
                   f"{', '.join(r.get('approximated', []))} | {reason} |")
    return "\n".join(out)


def _error_class(err):
    import re

    e = re.sub(r"'[^']*'", "'…'", err)
    e = re.sub(r"\d+", "N", e)
    return e[:120]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--report":
        print(report(sys.argv[2]))
        sys.exit(0)
    import zoo

    zoo.main(__file__, run_one, __doc__)
