#!/usr/bin/env python3
"""Include cycles between units of the C++ code: a unit is a .hpp with its .cpp (and a .cu/.cuh with its pair);
unit A depends on unit B when a file of A includes B's header. Prints each strongly connected component of more
than one unit (a cycle), per stage folder. Also checks the house's two other include rules (shared/ARCHITECTURE.md):
dependencies point down the stages (analysis < planner < runtime_allocator < torch_allocator; viz and cli read
everything, nothing includes cli), and the graph and the op registry include nothing above them. Exits 1 when any
rule is broken (0 otherwise); ctest runs it (include_rules).

    python3 scripts/include_cycles.py [--stage analysis] [--quiet]
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGES = ("analysis", "planner", "runtime_allocator", "torch_allocator", "viz", "cli")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def unit_of(path):
    base, ext = os.path.splitext(path)
    return base if ext in (".hpp", ".cpp", ".cu", ".cuh", ".h") else None


def graph():
    deps = {}
    for stage in STAGES:
        for dirpath, _, files in os.walk(os.path.join(ROOT, stage)):
            for f in files:
                rel = os.path.relpath(os.path.join(dirpath, f), ROOT)
                u = unit_of(rel)
                if u is None:
                    continue
                deps.setdefault(u, set())
                text = open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace").read()
                for inc in INCLUDE.findall(text):
                    v = unit_of(inc)
                    if v and v != u and os.path.exists(os.path.join(ROOT, inc)):
                        deps[u].add(v)
    return deps


def cycles(deps):
    """Tarjan's strongly connected components with more than one unit."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(deps.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(deps):
        if v not in index:
            visit(v)
    return out


# The ground floor: what the graph and the op registry may reach, transitively.
GROUND = {
    "analysis/graph": {"analysis/error", "analysis/float16"},
    "analysis/op_kinds": {"analysis/error", "analysis/float16", "analysis/graph"},
    "analysis/ops_detail": {"analysis/error", "analysis/float16", "analysis/graph", "analysis/op_kinds"},
    "analysis/ops": {"analysis/error", "analysis/float16", "analysis/graph", "analysis/op_kinds", "analysis/ops_detail",
                     "analysis/shape_rules"},
}
RANK = {"analysis": 0, "planner": 1, "runtime_allocator": 2, "torch_allocator": 3, "viz": 4, "cli": 5}


def reach(deps, u):
    seen, todo = set(), [u]
    while todo:
        for w in deps.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def rule_breaks(deps):
    """Includes that point up the stages, and ground-floor units that reach above their allowance."""
    out = []
    for u, vs in sorted(deps.items()):
        su = u.split("/")[0]
        for v in sorted(vs):
            sv = v.split("/")[0]
            if sv == "cli" and su != "cli":
                out.append(f"{u} includes {v}: nothing includes cli")
            elif su not in ("viz", "cli") and RANK[sv] > RANK[su]:
                out.append(f"{u} includes {v}: {su} may not reach up to {sv}")
    for u, allowed in GROUND.items():
        for v in sorted(reach(deps, u) - allowed):
            out.append(f"{u} reaches {v}: the graph and the op registry include nothing above them")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stage", choices=STAGES)
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    found = [c for c in cycles(graph()) if not a.stage or c[0].startswith(a.stage + "/")]
    for c in found:
        if not a.quiet:
            print(f"cycle of {len(c)} units: {', '.join(c)}")
    print(f"{len(found)} include cycle(s), {sum(len(c) for c in found)} units in them")
    breaks = [] if a.stage else rule_breaks(graph())
    for b in breaks:
        print(f"rule broken: {b}")
    return 1 if found or breaks else 0


if __name__ == "__main__":
    sys.exit(main())
