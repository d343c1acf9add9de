"""Differential testing against ONNX Runtime, the CI slice: a fixed range of random graphs (difftest_lib) run by
`memplan run` and by ONNX Runtime must agree (outputs and every inferred shape), and none may crash; graphs
memplan refuses with a documented error are counted, graphs ORT refuses skipped. The long run is
bench/difftest.py (10,000 graphs, bench/results/difftest_2026-11-24.md). Fewer graphs under a sanitizer build.
"""
import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import numpy  # noqa: F401
    import onnx  # noqa: F401
    import onnxruntime  # noqa: F401
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

import difftest_run as dr  # noqa: E402

SEEDS = 200  # about 20 s here with the CUDA-linked memplan (its start-up, 0.4 s a run, dominates); a quarter under ASan


def sanitized(memplan):
    return "build-asan" in memplan or "ASAN_OPTIONS" in os.environ


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=True)
    ap.add_argument("--seeds", type=int, default=None)
    a = ap.parse_args()
    if not os.path.exists(a.memplan):
        print(f"skip: {a.memplan} is not built")
        return 77
    n = a.seeds or (SEEDS // 4 if sanitized(a.memplan) else SEEDS)
    t0 = time.time()
    ops = dr.load_ops(a.memplan)
    results = dr.run_seeds(a.memplan, range(n), ops, batch=64)
    counts = collections.Counter(v for _, v, *_ in results)
    print(f"{n} graphs over {len(ops)} op types in {time.time() - t0:.1f} s: {dict(sorted(counts.items()))}")
    refused = collections.Counter(d for _, v, d, *_ in results if v == "refused")
    for d, k in refused.most_common():
        print(f"  refused {k}: {d}")
    bad = [(s, v, d, o) for s, v, d, o, _ in results if v in ("disagree", "crash")]
    for s, v, d, o in bad:
        print(f"FAIL seed {s} ({v}; {' '.join(o)}): {d}")
    # The slice must compare something: most graphs agree, not merely avoid disagreeing.
    if counts.get("agree", 0) < n // 2:
        print(f"FAIL only {counts.get('agree', 0)} of {n} graphs agree (generator or registry broken?)")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
