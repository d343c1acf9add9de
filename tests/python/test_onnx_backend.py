# ONNX's own backend test cases through `memplan run` against their reference outputs (rtol 1e-3, atol 1e-4).
# The scope rule and the verdicts are in onnx_backend_lib.py; bench/conformance.py runs every suite and writes
# bench/results/. Fails when a case crashes memplan (signal, exit 70, sanitizer report) or exits 0 with wrong
# numbers, or when the pass count of a suite falls below its measured floor.
import argparse
import concurrent.futures
import os
import subprocess
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

# Passing cases measured on 2026-11-24 (light: analyze only) (bench/results/conformance_2026-11-24.md); a drop is a regression.
PASS_FLOOR = {"simple": 3, "pytorch-operator": 35, "pytorch-converted": 82, "light": 9}  # measured after the N-d conv/pool and activation ops


def light_shapes(memplan, case):
    # The light model zoo is full-size CNNs (VGG-19, DenseNet-121, ...: about 70 s on the reference CPU kernels,
    # 3x that under ASan): here only imported, shaped and planned (`memplan analyze`); bench/conformance.py runs
    # them against their reference outputs.
    r = subprocess.run([memplan, "analyze", case.model], capture_output=True, text=True, errors="replace", timeout=120)
    if r.returncode < 0 or r.returncode == 70 or any(m in r.stderr for m in lib.SANITIZER_REPORTS):
        return "crash", f"analyze exit {r.returncode}: {r.stderr.strip()[-300:]}"
    return ("pass", "") if r.returncode == 0 else ("refused", f"analyze exit {r.returncode}: {r.stderr.strip()[:300]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples")
    a = ap.parse_args()
    suites = ["simple", "pytorch-operator", "pytorch-converted", "light", "real"]
    start = time.time()
    def judge(item):
        case, reason = item
        if reason:
            return case, "skip", reason
        return (case, *(light_shapes(a.memplan, case) if case.light else lib.run_case(a.memplan, case)))

    # Each case is its own memplan process: run them side by side (results keep discovery order).
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = list(pool.map(judge, list(lib.discover(suites))))
    for case, verdict, detail in results:
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
