#!/usr/bin/env python3
"""Scale bench for the input-bounded surfaces: elementwise chains (fused and --no-fuse), many-input Concats,
allocation traces (`viz --trace`) and opset-6 chains (the version converter's path) at 10^3..10^5.

Each case is generated once into a temporary folder, then timed (wall, min of --repeat runs; one run where a
run takes over --cheap seconds). The growth exponent of each series is the least-squares slope of log(time)
over log(size); near-linear work gives about 1 (small sizes are dominated by start-up, so the slope is taken
over the sizes of at least 10^4 too). Writes a Markdown table and JSON (--out PREFIX: PREFIX.md, PREFIX.json).

  python3 bench/scale_bench.py --memplan build/memplan --out bench/results/scale_2026-11-28
  python3 bench/scale_bench.py --only chain_fused --sizes 1000 8000   # one series, some sizes
"""
import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

import onnx
from onnx import TensorProto, helper

SHAPE = [32, 1024]


def save(model, path):
    onnx.save(model, path)
    return path


def chain_model(n, opset=17):
    """x -> Add(b) -> Relu -> Mul(c) -> Add(b) -> ... : n elementwise ops, every activation read once."""
    nodes, prev = [], "x"
    for i in range(n):
        out = f"t{i}"
        kind = ("Add", "Relu", "Mul")[i % 3]
        ins = [prev] if kind == "Relu" else [prev, "b" if kind == "Add" else "c"]
        nodes.append(helper.make_node(kind, ins, [out], name=f"{kind.lower()}_{i}"))
        prev = out
    g = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor("b", TensorProto.FLOAT, [SHAPE[-1]], [0.5] * SHAPE[-1]),
         helper.make_tensor("c", TensorProto.FLOAT, [SHAPE[-1]], [0.9] * SHAPE[-1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 3 if opset < 7 else 8
    return m


def concat_model(n):
    """n inputs of [1, 4], each through a Relu, concatenated along axis 1."""
    ins = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, 4]) for i in range(n)]
    nodes = [helper.make_node("Relu", [f"x{i}"], [f"r{i}"], name=f"relu_{i}") for i in range(n)]
    nodes.append(helper.make_node("Concat", [f"r{i}" for i in range(n)], ["y"], name="concat", axis=1))
    g = helper.make_graph(nodes, "concat", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4 * n])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def trace_doc(n):
    """An unplanned allocation trace of n blocks (the form memplan_torch.estimate_step writes): a sliding window
    of 8 live blocks of varied sizes, each freed 8 allocations later, the last 8 freed at the end."""
    blocks, events, live = [], [], []
    for k in range(n):
        size = 512 * (1 + (k * 7919) % 64)
        blocks.append({"size": size, "bytes": size, "stream": 0, "alloc_event": len(events), "free_event": None})
        events.append({"kind": "alloc", "block": k, "bytes": size})
        live.append(k)
        if len(live) > 8:
            j = live.pop(0)
            blocks[j]["free_event"] = len(events)
            events.append({"kind": "free", "block": j, "bytes": blocks[j]["bytes"]})
    for j in live:
        blocks[j]["free_event"] = len(events)
        events.append({"kind": "free", "block": j, "bytes": blocks[j]["bytes"]})
    return {"format": "memplan-allocation-trace", "version": 1, "device": 0, "alignment": 512, "primary_stream": 0,
            "planned": False, "caching_allocator_reserved_bytes": 0, "caching_allocator_max_allocated_bytes": 0,
            "events": events, "blocks": blocks}


# series name -> (make the input file, the memplan arguments after the file)
def series(tmp):
    def onnx_file(make, name):
        return lambda n: save(make(n), os.path.join(tmp, f"{name}_{n}.onnx"))

    def trace_file(n):
        p = os.path.join(tmp, f"trace_{n}.json")
        with open(p, "w") as f:
            json.dump(trace_doc(n), f)
        return p

    chain = onnx_file(chain_model, "chain")
    return {
        "chain_fused": (chain, lambda f: ["analyze", f]),
        "chain_no_fuse": (chain, lambda f: ["analyze", f, "--no-fuse"]),
        "chain_train_fused": (chain, lambda f: ["plan", f, "--train"]),
        "concat": (onnx_file(concat_model, "concat"), lambda f: ["analyze", f]),
        "trace_viz": (trace_file, lambda f: ["viz", "--trace", f, "-o", f + ".svg"]),
        "opset6_chain": (onnx_file(lambda n: chain_model(n, opset=6), "opset6"), lambda f: ["analyze", f, "--no-fuse"]),
        "opset6_chain_fused": (onnx_file(lambda n: chain_model(n, opset=6), "opset6f"), lambda f: ["analyze", f]),
    }


def timed(memplan, args, timeout):
    t0 = time.perf_counter()
    try:
        r = subprocess.run([memplan] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout, text=True)
    except subprocess.TimeoutExpired:
        return None, "timeout"
    dt = time.perf_counter() - t0
    return dt, (None if r.returncode == 0 else f"exit {r.returncode}: {r.stderr.strip()[:200]}")


def slope(points):
    pts = [(math.log(n), math.log(t)) for n, t in points if t and t > 0]
    if len(pts) < 2:
        return None
    mx, my = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else None


def fmt(row):
    if row is None:
        return "-"
    return f"{row['seconds']:.3f}" if row.get("seconds") is not None else (row.get("error") or "-").split(":")[0]


def markdown(res, notes):
    before = res.get("before", {}).get("series", {})
    out = [f"# Scale bench, {res['date']}", "", f"Machine: {res['machine']}. Command: `python3 bench/scale_bench.py`"
           f" (`{res['memplan']}`); wall seconds, min of 3 runs where a run is under 5 s.", ""]
    out += [n for n in notes] + ([""] if notes else [])
    out += ["| series | n | seconds | before (seconds) |", "|---|---:|---:|---:|"]
    for name, ser in res["series"].items():
        old = {r["n"]: r for r in before.get(name, {}).get("rows", [])}
        for r in ser["rows"]:
            out.append(f"| {name} | {r['n']} | {fmt(r)} | {fmt(old.get(r['n']))} |")
    out += ["", "Growth exponent (least-squares slope of log time over log n; 1 is linear):", "",
            "| series | slope 10^3..10^5 | slope 10^4..10^5 | before: slope 10^3..10^5 |", "|---|---:|---:|---:|"]
    f2 = lambda v: "-" if v is None else f"{v:.2f}"
    for name, ser in res["series"].items():
        out.append(f"| {name} | {f2(ser['slope'])} | {f2(ser['slope_from_1e4'])} | {f2(before.get(name, {}).get('slope'))} |")
    return "\n".join(out) + "\n"


def machine():
    cpu = "unknown cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{platform.node() or 'vm'}: {cpu}, {os.cpu_count()} cores (shared), Linux {platform.release()}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default="build/memplan")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--only", nargs="+", help="series to run (default: all)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cheap", type=float, default=5.0, help="runs longer than this are not repeated")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--out", help="write OUT.md and OUT.json")
    ap.add_argument("--before", help="a JSON this bench wrote for an earlier build: its figures go beside these in OUT.md")
    ap.add_argument("--note", action="append", default=[], help="a line for OUT.md (repeatable)")
    a = ap.parse_args()
    results = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "memplan": a.memplan, "series": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (make, args) in series(tmp).items():
            if a.only and name not in a.only:
                continue
            rows = []
            for n in a.sizes:
                path = make(n)
                best, err = None, None
                for r in range(a.repeat):
                    dt, err = timed(a.memplan, args(path), a.timeout)
                    if err:
                        break
                    best = dt if best is None else min(best, dt)
                    if dt > a.cheap:
                        break
                rows.append({"n": n, "seconds": best, "error": err})
                print(f"{name:20s} n={n:7d} {'%.3f s' % best if best is not None else err}", flush=True)
                os.remove(path)
                if err:
                    break
            pts = [(r["n"], r["seconds"]) for r in rows if r["seconds"]]
            results["series"][name] = {"rows": rows, "slope": slope(pts),
                                       "slope_from_1e4": slope([p for p in pts if p[0] >= 10000])}
    if a.out:
        if a.before:
            with open(a.before) as f:
                results["before"] = json.load(f)
        with open(a.out + ".json", "w") as f:
            json.dump(results, f, indent=1)
        with open(a.out + ".md", "w") as f:
            f.write(markdown(results, a.note))
    json.dump({k: (v["slope"], v["slope_from_1e4"]) for k, v in results["series"].items()}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
