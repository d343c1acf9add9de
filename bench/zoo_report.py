"""estimate_step against PyTorch's measured peaks: one row per zoo model and case, and the goal counts.

    python3 bench/zoo_report.py --truth truth.jsonl --estimate estimate.jsonl [--md OUT.md] [--worst 20]

Error = estimate / measured - 1 of the step's peak allocated bytes (torch.cuda.max_memory_allocated over the
steady-state step); also of the bytes allocated before the step and of the peak reserved bytes.
"""
import argparse
import json
import sys


def load(path):
    rows = {}
    for line in open(path):
        if line.strip():
            r = json.loads(line)
            rows[(r["id"], r["case"])] = r
    return rows


def compare(truth, est):
    out = []
    for key, t in sorted(truth.items()):
        e = est.get(key)
        row = {"id": key[0], "case": key[1], "measured_ok": t.get("ok", False), "estimated_ok": bool(e and e.get("ok")),
               "estimate_ran": e is not None}
        if row["measured_ok"] and row["estimated_ok"]:
            for f in ("peak_allocated_bytes", "before_step_bytes", "peak_reserved_bytes"):
                row[f + "_measured"] = t[f]
                row[f + "_estimated"] = e[f]
                row[f.replace("_bytes", "_error")] = e[f] / t[f] - 1 if t[f] else None
            row["sdpa_measured"] = t.get("sdpa_kernels")
            row["sdpa_estimated"] = e.get("sdpa_kernels")
        elif row["measured_ok"] and e:
            row["estimate_error"] = e.get("error")
        out.append(row)
    return out


def summary(rows):
    both = [r for r in rows if "peak_allocated_error" in r]
    measured = [r for r in rows if r["measured_ok"]]
    errs = [abs(r["peak_allocated_error"]) for r in both]
    return {"measured_cases": len(measured), "estimated_cases": len(both),
            "within_3pct": sum(e <= 0.03 for e in errs), "within_10pct": sum(e <= 0.10 for e in errs),
            "estimate_failed": sum(1 for r in measured if r["estimate_ran"] and not r["estimated_ok"]),
            "not_estimated": sum(1 for r in measured if not r["estimate_ran"]),
            "max_abs_error": max(errs) if errs else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--truth", required=True)
    ap.add_argument("--estimate", required=True)
    ap.add_argument("--md")
    ap.add_argument("--worst", type=int, default=25)
    a = ap.parse_args()
    rows = compare(load(a.truth), load(a.estimate))
    s = summary(rows)
    print(json.dumps(s))
    both = sorted((r for r in rows if "peak_allocated_error" in r), key=lambda r: -abs(r["peak_allocated_error"]))
    for r in both[:a.worst]:
        print(f"{r['id']:50s} {r['case']:11s} peak {r['peak_allocated_error']:+.3f} before {r['before_step_error']:+.3f} "
              f"reserved {r['peak_reserved_error']:+.3f}  measured {r['peak_allocated_bytes_measured'] / 2**20:8.1f} MiB "
              f"sdpa {r['sdpa_measured']} vs {r['sdpa_estimated']}")
    fails = [r for r in rows if r["measured_ok"] and r["estimate_ran"] and not r["estimated_ok"]]
    for r in fails[:a.worst]:
        print(f"{r['id']:50s} {r['case']:11s} estimate failed: {r.get('estimate_error')}")
    if a.md:
        write_md(a.md, rows, s)


def write_md(path, rows, s):
    with open(path, "w") as f:
        f.write("| model | case | measured peak MiB | estimated | error | before step error | reserved error |\n")
        f.write("|---|---|---:|---:|---:|---:|---:|\n")
        for r in rows:
            if "peak_allocated_error" in r:
                f.write(f"| {r['id']} | {r['case']} | {r['peak_allocated_bytes_measured'] / 2**20:.1f} | "
                        f"{r['peak_allocated_bytes_estimated'] / 2**20:.1f} | {100 * r['peak_allocated_error']:+.2f}% | "
                        f"{100 * r['before_step_error']:+.2f}% | {100 * r['peak_reserved_error']:+.2f}% |\n")
            elif r["measured_ok"] and r["estimate_ran"]:
                f.write(f"| {r['id']} | {r['case']} | measured | estimate failed: {r.get('estimate_error', '')} | | | |\n")
        f.write(f"\n{json.dumps(s)}\n")


if __name__ == "__main__":
    sys.exit(main())
