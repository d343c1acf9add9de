"""The ONNX route against PyTorch's measured peaks: per zoo model and case, the measured peak allocated bytes
(zoo_truth.py, on the GPU), estimate_step's (zoo_estimate.py), and from the TorchScript training export planned by
`memplan plan --train` (zoo_onnx.py): memplan's model of PyTorch eager (`pytorch_peak_bytes`) and memplan's own
keep-all plan (`peak_bytes`: persistent + inputs + activation arena). Summary counts and failure classes.

    python3 bench/zoo_onnx_report.py --truth truth.jsonl --estimate estimate.jsonl --onnx onnx.jsonl --md OUT.md
"""
import argparse
import collections
import json
import re
import sys

from zoo_report import load

MIB = 2**20


def err(pred, meas):
    return pred / meas - 1 if pred is not None and meas else None


OOM = "export: out of the VM's memory (23 GiB) tracing the forward at the example's size"


def failure_class(r):
    """A failure's class: what failed (export or plan) and its message with names and numbers taken out."""
    if "exported" not in r:  # the entry's process itself failed (zoo.main's row)
        e = r.get("error", "")
        if e.startswith("process exit -9"):
            return OOM
        return "run: " + re.sub(r"\d+", "N", e)[:110]
    if r.get("export_error"):
        e = r["export_error"]
        m = re.search(r"operator '(aten::[\w.]+)'", e)
        if m:
            return f"export: no ONNX symbolic for {m.group(1)} (opset 17)"
        if "can't allocate memory" in e:
            return OOM
        e = re.sub(r"'[^']*'", "'…'", e)
        e = re.sub(r"\d+", "N", e)
        return "export: " + e[:110]
    if not r.get("ok"):
        e = r.get("plan_error") or r.get("error") or ""
        e = re.sub(r"^memplan: ", "", e)
        e = re.sub(r"'[^']*'", "'…'", e)
        e = re.sub(r"\"[^\"]*\"", "\"…\"", e)
        e = re.sub(r"\d+(\.\d+)?", "N", e)
        return "plan: " + e[:140]
    return None


def source(model_id):
    return {"hf": "transformers", "timm": "timm", "torchvision": "torchvision", "rnn": "RNN"}[model_id.split("/")[0]]


def rows_of(truth, est, onnx):
    out = []
    for key, t in sorted(truth.items()):
        if not t.get("ok"):
            continue
        e, o = est.get(key), onnx.get(key)
        meas = t["peak_allocated_bytes"]
        r = {"id": key[0], "case": key[1], "measured": meas,
             "estimate": e["peak_allocated_bytes"] if e and e.get("ok") else None,
             "onnx_ran": o is not None, "exported": bool(o and o.get("exported")), "planned": bool(o and o.get("ok"))}
        r["estimate_error"] = err(r["estimate"], meas)
        if o and o.get("ok"):
            r.update(pytorch_peak=o["pytorch_peak_bytes"], keep_all=o["memplan_peak_bytes"],
                     plan_seconds=o.get("plan_seconds"), doubts=[d.get("kind") for d in o.get("doubts", [])])
            r["pytorch_peak_error"] = err(o["pytorch_peak_bytes"], meas)
            r["keep_all_ratio"] = o["memplan_peak_bytes"] / meas
        elif o:
            r["failure"] = failure_class(o)
            r["error"] = o.get("error", "")
        out.append(r)
    return out


def counts(rows):
    planned = [r for r in rows if r["planned"]]
    pe = [abs(r["pytorch_peak_error"]) for r in planned]
    both = [r for r in planned if r["estimate_error"] is not None]
    return {"measured": len(rows), "run": sum(r["onnx_ran"] for r in rows), "exported": sum(r["exported"] for r in rows),
            "planned": len(planned), "within_3": sum(e <= 0.03 for e in pe), "within_10": sum(e <= 0.10 for e in pe),
            "keep_all_le": sum(r["keep_all_ratio"] <= 1 for r in planned),
            "est_on_planned": len(both), "est_within_3": sum(abs(r["estimate_error"]) <= 0.03 for r in both),
            "est_within_10": sum(abs(r["estimate_error"]) <= 0.10 for r in both),
            "onnx_within_10_on_both": sum(abs(r["pytorch_peak_error"]) <= 0.10 for r in both),
            "plan_seconds_max": max((r["plan_seconds"] or 0 for r in planned), default=None),
            "plan_seconds_median": sorted(r["plan_seconds"] or 0 for r in planned)[len(planned) // 2] if planned else None}


def pct(a, b):
    return f"{a} ({100 * a / b:.1f}%)" if b else f"{a}"


def mib(x):
    return f"{x / MIB:.1f}" if x is not None else ""


def sgn(x):
    return f"{100 * x:+.1f}%" if x is not None else ""


def write_md(path, rows, header):
    lines = [header, ""]
    lines += ["## Summary", "",
              "| cases | measured | export ran | exported | planned | pytorch_peak_bytes within 3% | within 10% | "
              "keep-all plan <= measured | estimate_step within 3% / 10% on the same planned cases |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    groups = [("all", rows)] + [(c, [r for r in rows if r["case"] == c]) for c in ("fp32", "bf16_adamw")]
    groups += [(s, [r for r in rows if source(r["id"]) == s]) for s in ("transformers", "timm", "torchvision", "RNN")]
    for name, rs in groups:
        c = counts(rs)
        lines.append(f"| {name} | {c['measured']} | {c['run']} | {pct(c['exported'], c['measured'])} | "
                     f"{pct(c['planned'], c['measured'])} | {pct(c['within_3'], c['planned'])} | "
                     f"{pct(c['within_10'], c['planned'])} | {pct(c['keep_all_le'], c['planned'])} | "
                     f"{pct(c['est_within_3'], c['est_on_planned'])} / {pct(c['est_within_10'], c['est_on_planned'])} |")
    c = counts(rows)
    models = collections.defaultdict(list)
    for r in rows:
        models[r["id"]].append(r)
    lines += ["", f"Models: {len(models)} measured, {sum(any(r['onnx_ran'] for r in rs) for rs in models.values())} "
              f"run through the export, {sum(all(r['exported'] for r in rs) for rs in models.values())} exported, "
              f"{sum(all(r['planned'] for r in rs) for rs in models.values())} planned in both cases. "
              f"Within 10% counted of the planned cases (of all measured cases: "
              f"{pct(c['within_10'], c['measured'])}). Plan time (the VM, per case): median {c['plan_seconds_median']} s, "
              f"most {c['plan_seconds_max']} s.", ""]
    fails = collections.defaultdict(list)
    for r in rows:
        if r.get("failure"):
            fails[r["failure"]].append(r)
    lines += ["## Failure classes", "", "Cases (models) per class, most first; one example each.", "",
              "| class | cases | models | example | its error |", "|---|---:|---:|---|---|"]
    for cls, rs in sorted(fails.items(), key=lambda kv: -len(kv[1])):
        ex = rs[0]
        lines.append(f"| {cls.replace('|', '/')} | {len(rs)} | {len({r['id'] for r in rs})} | {ex['id']} {ex['case']} | "
                     f"{ex['error'].replace('|', '/')[:240]} |")
    planned = [r for r in rows if r["planned"]]
    worst = sorted((r for r in planned if abs(r["pytorch_peak_error"]) > 0.10), key=lambda r: -abs(r["pytorch_peak_error"]))
    above10 = sum(r["pytorch_peak_error"] > 0 for r in worst)
    doubted = sum(bool(r["doubts"]) for r in worst)
    doubted_all = sum(bool(r["doubts"]) for r in planned)
    lines += ["", f"## pytorch_peak_bytes over 10% off ({len(worst)} cases)", "",
              f"{above10} above the measured peak, {len(worst) - above10} below; {doubted} of them carry one of "
              f"memplan's doubts (`pytorch_peak_doubts`: an attention, RMSNorm or activation it counted op by op), as "
              f"do {doubted_all} of the {len(planned)} planned cases.", "",
              "| model | case | measured MiB | pytorch_peak_bytes error | estimate_step error | memplan's doubts |",
              "|---|---|---:|---:|---:|---|"]
    for r in worst:
        lines.append(f"| {r['id']} | {r['case']} | {mib(r['measured'])} | {sgn(r['pytorch_peak_error'])} | "
                     f"{sgn(r['estimate_error'])} | {', '.join(sorted(set(r['doubts'])))} |")
    above = sorted((r for r in planned if r["keep_all_ratio"] > 1), key=lambda r: -r["keep_all_ratio"])
    lines += ["", f"## Keep-all plan above the measured peak ({len(above)} cases)", "",
              "pytorch_peak_bytes errors of these cases are in the table above; estimate_step's are in the last table.",
              "",
              "| model | case | measured MiB | keep-all MiB | ratio |", "|---|---|---:|---:|---:|"]
    for r in above:
        lines.append(f"| {r['id']} | {r['case']} | {mib(r['measured'])} | {mib(r['keep_all'])} | {r['keep_all_ratio']:.3f} |")
    lines += ["", "## Every measured case", "",
              "| model | case | measured MiB | estimate_step MiB | error | pytorch_peak_bytes MiB | error | keep-all MiB | "
              "keep-all / measured | plan s | failure |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        fail = "" if r["planned"] else (r.get("failure") or "not run")
        lines.append(f"| {r['id']} | {r['case']} | {mib(r['measured'])} | {mib(r['estimate'])} | {sgn(r['estimate_error'])} | "
                     f"{mib(r.get('pytorch_peak'))} | {sgn(r.get('pytorch_peak_error'))} | {mib(r.get('keep_all'))} | "
                     f"{r['keep_all_ratio']:.3f} | {r.get('plan_seconds')} | |".replace("| |", f"| {fail.replace('|', '/')} |", 1)
                     if r["planned"] else
                     f"| {r['id']} | {r['case']} | {mib(r['measured'])} | {mib(r['estimate'])} | {sgn(r['estimate_error'])} | "
                     f"| | | | | {fail.replace('|', '/')} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


HEADER = """# The ONNX route on the zoo beside PyTorch's measured peaks

Each measured zoo model (bench/zoo.py; truth.jsonl, PyTorch 2.11 on one NVIDIA H200, 2026-11-27) exported with the
TorchScript exporter in training mode (bench/zoo_onnx.py: opset 17, nothing folded, the example's fixed sizes) and
planned by `memplan plan --train --loss ce` (fp32: `--optimizer none`; bf16_adamw: `--optimizer adamw --precision
bf16`), on the VM (2-core AMD EPYC, no GPU). **pytorch_peak_bytes** is memplan's model of PyTorch eager on that
export; **keep-all** is memplan's own plan with nothing recomputed or swapped (its `peak_bytes`: persistent +
inputs + activation arena; the library workspaces it counts apart are not in it); **estimate_step** is
memplan_torch's CPU estimate (estimate.jsonl). Errors are prediction / measured - 1 of the step's peak allocated
bytes (torch.cuda.max_memory_allocated). Written by bench/zoo_onnx_report.py."""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--truth", required=True)
    ap.add_argument("--estimate", required=True)
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--md")
    ap.add_argument("--note", default="", help="a paragraph added under the header (dates, machines)")
    a = ap.parse_args()
    rows = rows_of(load(a.truth), load(a.estimate), load(a.onnx))
    print(json.dumps(counts(rows)))
    if a.md:
        write_md(a.md, rows, HEADER + ("\n\n" + a.note if a.note else ""))


if __name__ == "__main__":
    sys.exit(main())
