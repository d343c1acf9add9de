# ONNX's own backend test cases through `memplan run` against their reference outputs (rtol 1e-3, atol 1e-4).
# The scope rule and the verdicts are in onnx_backend_lib.py; bench/conformance.py runs every suite and writes
# bench/results/. Fails when a case crashes memplan (signal, exit 70, sanitizer report) or exits 0 with wrong
# numbers, or when the pass count of a suite falls below its measured floor.
import argparse
import os
import sys
import time

try:
    import numpy  # noqa: F401
    import onnx  # noqa: F401
except ImportError:
    print("skip: numpy or onnx is not installed")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_backend_lib as lib  # noqa: E402

# Passing cases measured on 2026-11-24 (bench/results/conformance_2026-11-24.md); a drop is a regression.
PASS_FLOOR = {"simple": 0, "pytorch-operator": 0, "pytorch-converted": 0, "light": 0}


def sanitized(memplan):
    # scripts/test_sanitize.sh exports ASAN_OPTIONS and builds in build-asan/: ~3x slower, the light model zoo
    # (full-size CNNs on the reference CPU kernels) is left to the plain build there.
    return bool(os.environ.get("ASAN_OPTIONS")) or "asan" in os.path.basename(os.path.dirname(os.path.abspath(memplan)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples")
    a = ap.parse_args()
    suites = ["simple", "pytorch-operator", "pytorch-converted", "real"]
    if not sanitized(a.memplan):
        suites.append("light")
    start = time.time()
    results = []
    for case, reason in lib.discover(suites):
        verdict, detail = ("skip", reason) if reason else lib.run_case(a.memplan, case)
        results.append((case, verdict, detail))
        if verdict not in ("pass", "skip"):
            print(f"{verdict:8s} {case.id}: {detail}")
    counts = lib.tally(results)
    problems = []
    for suite in suites:
        c = counts.get(suite, {})
        in_scope = sum(v for k, v in c.items() if k != "skip")
        print(f"{suite:18s} pass {c.get('pass', 0):3d} of {in_scope:3d} in scope; refused {c.get('refused', 0)}, "
              f"wrong {c.get('wrong', 0)}, crash {c.get('crash', 0)}, timeout {c.get('timeout', 0)}, skipped {c.get('skip', 0)}")
        if suite in PASS_FLOOR and c.get("pass", 0) < PASS_FLOOR[suite]:
            problems.append(f"{suite}: {c.get('pass', 0)} pass, the floor is {PASS_FLOOR[suite]}")
    for case, verdict, detail in results:
        if verdict in ("crash", "wrong", "timeout"):
            problems.append(f"{case.id} {verdict}: {detail}")
    print(f"{time.time() - start:.1f} s")
    for p in problems:
        print("FAIL", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
