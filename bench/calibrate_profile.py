#!/usr/bin/env python3
"""Per-op-type scales of the step-time estimate from measured op times: reads bench_cuda train outputs run with
profile=1 (the `none` row's op_profile.by_op_type: each Op::type's measured seconds, every op timed alone, beside its
roofline seconds on the profile the run planned with) and writes a device profile whose op_scale[type] is the
type's measured seconds over its roofline seconds, summed over every model given (types measured for less than
`--min-seconds` in all keep the roofline). Timing ops one by one adds a per-op cost the step does not pay (a
synchronization per op: 16-40 us on the H100); per model it is the op-by-op total less the step's measured time,
spread evenly over its ops and taken off each type's seconds (never below a tenth of them). The planners' estimates (planner/step_time.hpp, the strategies' choices,
strategy exact's MILP cost) then use it through `memplan plan --device-profile` or bench_cuda device_profile=.

Usage: bench/calibrate_profile.py --base samples/device_profiles/h100.json --out PROFILE.json RUN.json [RUN.json ...]
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the device profile the scales apply to (its roofline)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--min-seconds", type=float, default=20e-6)
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    base = json.load(open(a.base))
    measured, roofline, models = {}, {}, []
    for path in a.runs:
        run = json.load(open(path))
        by_type = run.get("strategies", {}).get("none", {}).get("op_profile", {}).get("by_op_type")
        if not by_type:
            sys.exit(f"{path}: no op_profile.by_op_type in the none row (run bench_cuda train ... profile=1)")
        models.append(run.get("model", path))
        none = run["strategies"]["none"]
        rows = {k: v for k, v in none["op_profile"].items() if k != "by_op_type"}
        count = {}
        for k, v in rows.items():  # keys: Op::type, with " (phase)" after it off the forward
            t = k.split(" (")[0]
            count[t] = count.get(t, 0) + v["ops"]
        one_by_one = sum(v["seconds"] for v in rows.values())
        per_op = max(0.0, (one_by_one - none["step_seconds"]) / max(1, sum(count.values())))
        for t, v in by_type.items():
            m = max(0.1 * v["measured_seconds"], v["measured_seconds"] - per_op * count.get(t, 0))
            measured[t] = measured.get(t, 0.0) + m
            roofline[t] = roofline.get(t, 0.0) + v["roofline_seconds"]
    scale = {t: measured[t] / roofline[t] for t in sorted(measured)
             if roofline[t] > 0 and measured[t] >= a.min_seconds and measured[t] > 0}
    prof = dict(base)
    prof["name"] = base.get("name", "device") + "-op-scaled"
    prof["op_scale"] = scale
    prof["notes"] = (base.get("notes", "") + "; op_scale: measured / roofline seconds per op type over the keep-all steps of "
                     + ", ".join(models) + " (bench/calibrate_profile.py)")
    json.dump(prof, open(a.out, "w"), indent=1, sort_keys=True)
    total_m, total_r = sum(measured.values()), sum(roofline.values())
    print(f"{len(scale)} op types scaled; keep-all steps: {1e3 * total_m:.2f} ms measured (op by op, less the per-op cost), "
          f"{1e3 * total_r:.2f} ms roofline")
    for t, s in sorted(scale.items(), key=lambda kv: -measured[kv[0]])[:15]:
        print(f"  {t}: {1e3 * measured[t]:.2f} ms measured / {1e3 * roofline[t]:.2f} ms roofline = {s:.2f}")


if __name__ == "__main__":
    main()
