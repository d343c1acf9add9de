#!/usr/bin/env python3
"""Drives `memplan trace` and validates the JSON against the Chrome Trace Event Format.

Checks, per event type, the fields the format requires (ph, pid, name; ts and dur for complete events;
numeric args for counters; args.name for metadata), non-negative times, spans laid end to end in the
plan's schedule order (args.op), fused ops' spans labelled "kind ×members · op" with their members in args,
and counters equal to the live bytes the plan's buffers give at each step.
Exit 77 when the command or the samples are missing.
"""
import json
import numbers
import os
import sys
import tempfile

from viz_testlib import check, cli_args, failures, plan_usage, run

MODELS = ["tiny_mlp.onnx", "tiny_gpt.onnx", "resnet18.onnx"]


def validate_events(doc, name):
    """The format's own rules, independent of memplan: returns (spans, counters)."""
    if not check(isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list), f"{name}: no traceEvents array"):
        return [], []
    spans, counters = [], []
    for i, e in enumerate(doc["traceEvents"]):
        where = f"{name}: event {i}"
        if not check(isinstance(e, dict) and isinstance(e.get("ph"), str), f"{where}: no ph"):
            continue
        check(isinstance(e.get("pid"), int), f"{where}: pid missing or not an integer")
        check(isinstance(e.get("name"), str) and e["name"] != "", f"{where}: name missing")
        ph = e["ph"]
        if ph == "X":
            ok = all(isinstance(e.get(k), numbers.Real) for k in ("ts", "dur")) and isinstance(e.get("tid"), int)
            if check(ok, f"{where}: X event needs numeric ts, dur and integer tid"):
                check(e["ts"] >= 0 and e["dur"] >= 0, f"{where}: negative ts or dur")
                spans.append(e)
        elif ph == "C":
            args = e.get("args")
            ok = isinstance(e.get("ts"), numbers.Real) and isinstance(args, dict) and args
            if check(ok, f"{where}: C event needs ts and args"):
                check(e["ts"] >= 0, f"{where}: negative ts")
                check(all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in args.values()), f"{where}: counter values must be numbers")
                counters.append(e)
        elif ph == "M":
            check(e["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index"), f"{where}: unknown metadata {e['name']}")
            check(isinstance(e.get("args", {}).get("name"), str), f"{where}: metadata without args.name")
        else:
            check(False, f"{where}: unexpected phase {ph!r}")
    return spans, counters


def main():
    a = cli_args()
    if a is None:
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        for m in MODELS:
            model = os.path.join(a.samples, "models", m)
            plan_file, trace_file = os.path.join(tmp, m + ".plan.json"), os.path.join(tmp, m + ".trace.json")
            run(a.memplan, "analyze", model, "--save-plan", plan_file)
            run(a.memplan, "trace", model, "--plan", plan_file, "-o", trace_file)
            with open(plan_file) as f:
                plan = json.load(f)
            with open(trace_file) as f:
                doc = json.load(f)
            spans, counters = validate_events(doc, m)
            check([s["args"].get("op") for s in spans] == plan["schedule"], f"{m}: spans are not the plan's schedule in order")
            # A fused op's span is labelled with its kind and member count and lists its members.
            fused = {e["op"]: e for e in plan.get("fused_groups", [])}
            for s in spans:
                g = fused.get(s["args"]["op"])
                if g is None:
                    check(s["name"] == s["args"]["op"] and "members" not in s["args"], f"{m}: unfused span {s['name']} is labelled otherwise")
                    continue
                check(s["name"] == f"{g['kind']} \u00d7{len(g['members'])} \u00b7 {g['op']}", f"{m}: fused span named {s['name']!r}")
                check(s["args"].get("members") == g["members"] and s["args"].get("fused") == g["kind"], f"{m}: fused span {g['op']} args")
            clock = 0.0
            for s in spans:
                check(abs(s["ts"] - clock) <= 1e-6 * max(1.0, clock), f"{m}: span {s['name']} starts at {s['ts']}, expected {clock}")
                clock = s["ts"] + s["dur"]
            live = plan_usage(plan)[0]
            got = [c["args"]["live"] for c in counters]
            check(got[: len(live)] == live, f"{m}: counter values differ from the plan's live bytes")
            check(len(counters) == len(live) + 1 and got[-1] == 0, f"{m}: the counter does not return to 0 at the end")
            print(f"ok   {m}: {len(spans)} spans, {len(counters)} counter samples")
        # A training trace puts swap copies, recomputation and backward ops on the same clock.
        trace_file = os.path.join(tmp, "train.trace.json")
        try:
            run(a.memplan, "trace", os.path.join(a.samples, "models", "tiny_cnn.onnx"), "--train", "--strategy", "sqrt", "-o", trace_file)
            with open(trace_file) as f:
                spans, _ = validate_events(json.load(f), "tiny_cnn training")
            cats = {s.get("cat") for s in spans}
            check({"forward", "backward"} <= cats, f"tiny_cnn training: categories {cats}")
            print(f"ok   tiny_cnn training: {len(spans)} spans, categories {sorted(cats)}")
        except RuntimeError as e:
            check(False, f"training trace failed: {e}")
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
