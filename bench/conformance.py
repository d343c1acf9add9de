# Runs every ONNX backend case the installed `onnx` wheel ships through `memplan run` and writes the verdicts per
# suite with each failing case's reason (markdown). Scope rule and verdicts: tests/python/onnx_backend_lib.py.
# Usage: python3 bench/conformance.py --memplan build/memplan [--out bench/results/conformance_DATE.md]
import argparse
import os
import platform
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import onnx  # noqa: E402
import onnx_backend_lib as lib  # noqa: E402

VERDICTS = ["pass", "refused", "wrong", "crash", "timeout", "skip"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                  "conformance_2026-11-24.md"))
    ap.add_argument("--timeout", type=int, default=300)
    a = ap.parse_args()
    results, seconds = [], {}
    for case, reason in lib.discover():
        t0 = time.time()
        verdict, detail = ("skip", reason) if reason else lib.run_case(a.memplan, case, timeout=a.timeout)
        seconds[case.id] = time.time() - t0
        results.append((case, verdict, detail))
        print(f"{verdict:8s} {case.id} {detail}", flush=True)
    counts = lib.tally(results)
    lines = ["# ONNX backend conformance of `memplan run` (2026-11-24)", "",
             f"Every case of the `onnx` {onnx.__version__} wheel's backend test data ({lib.data_root()}) run by "
             f"`bench/conformance.py` on {platform.node()} ({platform.machine()}, CPU backend); outputs compared with "
             f"the shipped references at rtol {lib.RTOL}, atol {lib.ATOL}. Scope rule and verdicts: "
             "`tests/python/onnx_backend_lib.py` (the CI test is `tests/python/test_onnx_backend.py`).", "",
             "| suite | in scope | pass | refused | wrong | crash | timeout | skipped |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    total = {v: 0 for v in VERDICTS}
    for suite in lib.SUITES:
        c = counts.get(suite, {})
        for v in VERDICTS:
            total[v] += c.get(v, 0)
        in_scope = sum(c.get(v, 0) for v in VERDICTS if v != "skip")
        lines.append(f"| {suite} | {in_scope} | " + " | ".join(str(c.get(v, 0)) for v in VERDICTS) + " |")
    in_scope = sum(total[v] for v in VERDICTS if v != "skip")
    lines.append(f"| **all** | {in_scope} | " + " | ".join(str(total[v]) for v in VERDICTS) + " |")
    pct = 100.0 * total["pass"] / in_scope if in_scope else 0.0
    lines += ["", f"{total['pass']} of {in_scope} in-scope cases pass ({pct:.1f}%).", ""]
    for title, wanted in [("Failing in-scope cases", {"refused", "wrong", "crash", "timeout"}), ("Skipped (out of scope)", {"skip"})]:
        lines += [f"## {title}", "", "| case | verdict | reason |", "|---|---|---|"]
        for case, verdict, detail in results:
            if verdict in wanted:
                lines.append(f"| {case.id} | {verdict} | {detail.replace('|', '/')} |")
        lines.append("")
    slow = sorted(seconds.items(), key=lambda kv: -kv[1])[:5]
    lines += ["Slowest cases: " + ", ".join(f"{k} {v:.1f} s" for k, v in slow), ""]
    with open(a.out, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines[:16]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
