#!/usr/bin/env python3
"""Limits of size (docs/errors.md, "Limits of size"): inputs past them get clear errors, inputs within them get
linear structure. No wall time is asserted (bench/scale_bench.py measures it); the properties are counts:
- a 20,000-op elementwise chain fuses into groups of at most 256 ops (ceil(20000 / 256) fused ops, every op a
  member of exactly one group) and its plan is valid; --no-fuse keeps 20,000 ops;
- a 600-op chain cut at 256 computes what the unfused chain computes (`run`, fused and --no-fuse);
- an opset-6 model of more than 10,000 nodes is refused at once (exit 5, the count and the limit named), one of
  300 nodes is converted;
- a Concat of 20,000 inputs plans validly with its inputs in place; an allocation trace of 20,000 blocks draws;
- JSON nested 65 levels and a key given twice stay malformed (exit 4) under the one-pass reader.
Exit 77 when memplan or onnx is missing.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

from viz_testlib import check, cli_args, failures

MAX_GROUP_OPS = 256
MAX_CONVERTED_NODES = 10000


def memplan(a, *args):
    return subprocess.run([a.memplan, *args], capture_output=True, text=True)


def main():
    a = cli_args()
    if a is None:
        return 77
    try:
        import numpy as np
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
        import scale_bench as sb
    except ImportError as e:
        print(f"skip: {e}")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        # Fusion groups are capped, and the cut chain stays one plan.
        chain = sb.save(sb.chain_model(20000), os.path.join(tmp, "chain.onnx"))
        r = memplan(a, "analyze", chain, "--json")
        if check(r.returncode == 0, f"analyze of a 20,000-op chain exited {r.returncode}: {r.stderr[-300:]}"):
            j = json.loads(r.stdout)
            groups = j["fusion"]["groups"]
            sizes = [len(g["members"]) for g in groups]
            check(j["plan_valid"] is True, "the 20,000-op chain's plan is not valid")
            check(max(sizes) <= MAX_GROUP_OPS, f"a fusion group has {max(sizes)} ops, over {MAX_GROUP_OPS}")
            check(sum(sizes) == 20000, f"the groups hold {sum(sizes)} ops, not the chain's 20,000")
            check(len(groups) == math.ceil(20000 / MAX_GROUP_OPS), f"{len(groups)} groups for 20,000 ops")
            check(j["ops"] == len(groups), f"the fused graph has {j['ops']} ops for {len(groups)} groups")
            members = [m for g in groups for m in g["members"]]
            check(len(set(members)) == len(members), "an op is in two groups")
        r = memplan(a, "analyze", chain, "--json", "--no-fuse")
        if check(r.returncode == 0, f"analyze --no-fuse exited {r.returncode}: {r.stderr[-300:]}"):
            check(json.loads(r.stdout)["ops"] == 20000, "--no-fuse does not keep the 20,000 ops")

        # A chain cut at the cap computes what the unfused chain does.
        small = sb.save(sb.chain_model(600), os.path.join(tmp, "chain600.onnx"))
        x = np.random.default_rng(7).standard_normal(sb.SHAPE).astype(np.float32) * 0.01
        np.save(os.path.join(tmp, "x.npy"), x)
        outs = {}
        for name, extra in (("fused", []), ("unfused", ["--no-fuse"])):
            out = os.path.join(tmp, f"y_{name}.npy")
            r = memplan(a, "run", small, "--input", os.path.join(tmp, "x.npy"), "-o", out, *extra)
            if check(r.returncode == 0, f"run ({name}) of a 600-op chain exited {r.returncode}: {r.stderr[-300:]}"):
                outs[name] = np.load(out)
        if len(outs) == 2:
            check(np.allclose(outs["fused"], outs["unfused"], rtol=1e-5, atol=1e-6),
                  f"the fused 600-op chain differs from the unfused one by {np.abs(outs['fused'] - outs['unfused']).max()}")

        # The version converter's limit.
        big6 = sb.save(sb.chain_model(MAX_CONVERTED_NODES + 1, opset=6), os.path.join(tmp, "big6.onnx"))
        r = memplan(a, "analyze", big6, "--no-fuse")
        check(r.returncode == 5, f"an opset-6 model of {MAX_CONVERTED_NODES + 1} nodes exited {r.returncode}, not 5 (unsupported)")
        check(f"at most {MAX_CONVERTED_NODES} nodes" in r.stderr and f"has {MAX_CONVERTED_NODES + 1}" in r.stderr,
              f"the refusal does not name the limit and the count: {r.stderr.strip()[:300]}")
        small6 = sb.save(sb.chain_model(300, opset=6), os.path.join(tmp, "small6.onnx"))
        r = memplan(a, "analyze", small6, "--json")
        check(r.returncode == 0 and json.loads(r.stdout or "{}").get("plan_valid") is True,
              f"an opset-6 chain of 300 nodes is not converted and planned: {r.stderr[-300:]}")

        # Many-input Concat and a long allocation trace.
        concat = sb.save(sb.concat_model(20000), os.path.join(tmp, "concat.onnx"))
        r = memplan(a, "analyze", concat, "--json")
        if check(r.returncode == 0, f"a Concat of 20,000 inputs exited {r.returncode}: {r.stderr[-300:]}"):
            j = json.loads(r.stdout)
            check(j["plan_valid"] is True, "the 20,000-input Concat's plan is not valid")
            # In place, the inputs are slices of the output: the arena holds the output alone.
            check(j["arena_bytes"] <= 20000 * 4 * 4 + 4096, f"the Concat's inputs are not in place (arena {j['arena_bytes']})")
        trace = os.path.join(tmp, "trace.json")
        with open(trace, "w") as f:
            json.dump(sb.trace_doc(20000), f)
        r = memplan(a, "viz", "--trace", trace, "-o", os.path.join(tmp, "trace.svg"))
        check(r.returncode == 0 and os.path.getsize(os.path.join(tmp, "trace.svg")) > 0,
              f"viz --trace of 20,000 blocks exited {r.returncode}: {r.stderr[-300:]}")

        # The one-pass JSON reader keeps the strict reader's refusals.
        doc = sb.trace_doc(4)
        deep = dict(doc, extra=json.loads("[" * 65 + "]" * 65))
        for name, text in (("nested 65 levels", json.dumps(deep)),
                           ("a key twice", json.dumps(doc)[:-1] + ', "device": 0}'),
                           ("truncated", json.dumps(doc)[:-5])):
            with open(trace, "w") as f:
                f.write(text)
            r = memplan(a, "viz", "--trace", trace, "-o", os.path.join(tmp, "bad.svg"))
            check(r.returncode == 4, f"a trace {name} exited {r.returncode}, not 4 (malformed): {r.stderr.strip()[:200]}")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
