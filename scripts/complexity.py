#!/usr/bin/env python3
"""Function sizes of the C++ code, measured with lizard (PyPI): lines (start to end) and cyclomatic complexity per
function, over the stage folders. Prints how many functions are longer than --max-length lines or more complex than
--max-ccn, and the worst ones. Tables the op registry and kernels are built from (a list of records, one statement
each) count as generated tables and are listed apart.

    python3 scripts/complexity.py [--top 20] [--ceiling N]

--ceiling N: exit 1 when more than N functions (outside the tables) exceed either limit, so the count only goes
down (ctest `function_sizes` passes the ceiling recorded at the last measurement, bench/results/complexity.md).
Exit 77 (skipped) when lizard is not installed.
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGES = ("analysis", "planner", "runtime_allocator", "torch_allocator", "viz", "cli")
# Functions that are tables: one record per statement, no branches (cyclomatic complexity under 4).
TABLE_CCN = 4


def measure():
    import lizard

    files = []
    for stage in STAGES:
        for dirpath, _, names in os.walk(os.path.join(ROOT, stage)):
            files += [os.path.join(dirpath, n) for n in names if n.endswith((".cpp", ".hpp", ".cu", ".cuh"))]
    rows = []
    for info in lizard.analyze_files(sorted(files)):
        for f in info.function_list:
            rows.append({"file": os.path.relpath(info.filename, ROOT), "line": f.start_line, "name": f.name,
                         "length": f.length, "ccn": f.cyclomatic_complexity})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-length", type=int, default=80)
    ap.add_argument("--max-ccn", type=int, default=25)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--ceiling", type=int)
    a = ap.parse_args()
    try:
        rows = measure()
    except ImportError:
        print("SKIP: lizard is not installed (pip install lizard)")
        return 77
    over = [r for r in rows if r["length"] > a.max_length or r["ccn"] > a.max_ccn]
    tables = [r for r in over if r["ccn"] < TABLE_CCN]
    code = [r for r in over if r["ccn"] >= TABLE_CCN]
    longest = max(rows, key=lambda r: r["length"])
    print(f"{len(rows)} functions; {sum(r['length'] > a.max_length for r in rows)} longer than {a.max_length} lines, "
          f"{sum(r['ccn'] > a.max_ccn for r in rows)} above complexity {a.max_ccn}; "
          f"{len(code)} over either limit outside {len(tables)} tables")
    print(f"longest: {longest['name']} ({longest['file']}:{longest['line']}) {longest['length']} lines")
    for title, key in (("longest", "length"), ("most complex", "ccn")):
        print(f"{title}:")
        for r in sorted(code, key=lambda r: -r[key])[:a.top]:
            print(f"  {r['length']:4d} lines  ccn {r['ccn']:3d}  {r['name']}  {r['file']}:{r['line']}")
    if a.ceiling is not None and len(code) > a.ceiling:
        print(f"FAIL: {len(code)} functions over the limits, more than the ceiling {a.ceiling}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
