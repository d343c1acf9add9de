#!/usr/bin/env python3
"""Tables from bench/plan_step_bench.py's JSON lines (issue 32's figures): per model, PyTorch's own ways (eager,
per-block checkpointing, torch.compile at each activation_memory_budget) beside memplan's plans applied in eager
and under compile; at each of compile's measured peaks, the memplan plan of the largest budget at or below it; how
far each applied plan's measured peak is from its estimate and its budget.

    python3 bench/plan_step_report.py bench/results/plan_step_h200_2026-11-28/*.jsonl > report.md
"""
import json
import sys
from collections import defaultdict

MIB = 2 ** 20


def load(paths):
    rows = defaultdict(list)
    for p in paths:
        with open(p) as f:
            for line in f:
                line = line.strip()
                if line:
                    r = json.loads(line)
                    rows[(r["model"], bool(r.get("deterministic")))].append(r)
    return rows


def mib(x):
    return "" if x is None else f"{x / MIB:.0f}"


def ms(r):
    return "" if r.get("median_step_s") is None else f"{r['median_step_s'] * 1e3:.1f}"


def rel(r):
    d = r.get("loss_max_rel_diff")
    return "" if d is None else ("0 (bitwise)" if d == 0 else f"{d:.1e}")


def model_table(model, rows):
    out = [f"### {model}", "", "| configuration | budget MiB | estimated MiB | measured peak MiB | median step ms | "
           "within budget | losses vs eager (max rel. diff) |", "|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        cfg = r["config"]
        if cfg == "compile":
            cfg = f"compile, activation_memory_budget {r['activation_memory_budget']}"
        elif cfg.startswith("memplan"):
            s = r.get("plan_summary") or {}
            cfg = (f"{cfg} (step {r.get('steps_taken')}: {s.get('checkpointed_regions', 0)} regions recomputed, "
                   f"{(s.get('offloaded_bytes') or 0) / MIB:.0f} MiB offloaded)")
        peak = r.get("peak_allocated_bytes")
        err = r.get("error")
        out.append(f"| {cfg} | {mib(r.get('budget_bytes'))} | {mib(r.get('estimated_peak_bytes'))} | "
                   f"{mib(peak) if not err else 'error: ' + err[:80]} | {ms(r)} | "
                   f"{'' if r.get('within_budget') is None else r['within_budget']} | {rel(r)} |")
    return out


def versus_compile(model, rows):
    """At each compile budget's measured peak: the memplan plan (eager) of the largest budget at or below it."""
    mem = [r for r in rows if r["config"] == "memplan_eager" and r.get("peak_allocated_bytes")]
    out = []
    for c in sorted((r for r in rows if r["config"] == "compile" and r.get("peak_allocated_bytes")),
                    key=lambda r: -r["peak_allocated_bytes"]):
        fit = [m for m in mem if m["budget_bytes"] <= c["peak_allocated_bytes"]]
        best = max(fit, key=lambda m: m["budget_bytes"]) if fit else None
        out.append(f"| {model} | {c['activation_memory_budget']} | {mib(c['peak_allocated_bytes'])} | {ms(c)} | "
                   + (f"{mib(best['budget_bytes'])} | {mib(best['peak_allocated_bytes'])} | {ms(best)} |"
                      if best else "no plan | | |"))
    low_c = min((r["peak_allocated_bytes"] for r in rows if r["config"] == "compile"
                 and r.get("peak_allocated_bytes")), default=None)
    low_m = min((m["peak_allocated_bytes"] for m in mem), default=None)
    return out, low_c, low_m


def main(paths):
    rows = load(paths)
    print("## Per model\n")
    for (model, det), rs in sorted(rows.items()):
        print("\n".join(model_table(model + (" (deterministic algorithms)" if det else ""), rs)))
        print()
    print("## At compile's memory\n")
    print("| model | activation_memory_budget | compile peak MiB | compile ms | memplan budget MiB | memplan peak MiB "
          "| memplan eager ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    lows = []
    for (model, det), rs in sorted(rows.items()):
        if det:
            continue
        lines, low_c, low_m = versus_compile(model, rs)
        print("\n".join(lines))
        lows.append((model, low_c, low_m))
    print("\n## memplan's plans under torch.compile beside compile's own budgets\n")
    print("| model | plan (step, for compile) | memplan+compile peak MiB | ms | compile at the nearest peak at or above "
          "(budget: peak MiB, ms) |")
    print("|---|---|---:|---:|---|")
    for (model, det), rs in sorted(rows.items()):
        comp = [r for r in rs if r["config"] == "compile" and r.get("peak_allocated_bytes")]
        for m in rs:
            if m["config"] != "memplan_compile" or not m.get("peak_allocated_bytes"):
                continue
            above = [c for c in comp if c["peak_allocated_bytes"] >= m["peak_allocated_bytes"]]
            near = min(above, key=lambda c: c["peak_allocated_bytes"]) if above else None
            s = m.get("plan_summary") or {}
            print(f"| {model} | step {m.get('steps_taken')}, {s.get('whole_checkpoints', 0)} whole + "
                  f"{s.get('selective_checkpoints', 0)} selective | {mib(m['peak_allocated_bytes'])} | {ms(m)} | "
                  + (f"{near['activation_memory_budget']}: {mib(near['peak_allocated_bytes'])}, {ms(near)} |" if near
                     else "none reaches it |"))
    print("\n| model | lowest compile peak MiB | lowest memplan peak MiB |\n|---|---:|---:|")
    for model, low_c, low_m in lows:
        print(f"| {model} | {mib(low_c)} | {mib(low_m)} |")
    errs = [(r["peak_allocated_bytes"] - r["estimated_peak_bytes"]) / r["estimated_peak_bytes"]
            for rs in rows.values() for r in rs
            if r["config"] == "memplan_eager" and r.get("peak_allocated_bytes") and r.get("estimated_peak_bytes")]
    if errs:
        print(f"\nmemplan_eager rows: {len(errs)}; measured peak against the plan's estimate: "
              f"{min(errs) * 100:+.2f}% to {max(errs) * 100:+.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
