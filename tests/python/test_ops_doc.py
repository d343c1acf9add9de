"""`memplan ops`: docs/ops.md is its current --markdown output, --json has its fields, and a model's gaps are reported.

docs/ops.md is regenerated with `memplan ops --markdown` and compared line by line; the first differing line is
named. Regenerate it with `build/memplan ops --markdown > docs/ops.md` (or run this script with --update). A build
without the CUDA backend prints "not built" in the CUDA column; that column alone is then left out of the
comparison. A tiny ONNX model with an op memplan does not know and a known op that lacks something must be
reported (exit 0: it is a report).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL: " + what)


def memplan_run(memplan, *args):
    return subprocess.run([memplan, "ops", *args], capture_output=True, text=True)


def cells(line):
    """The cells of a Markdown table row (escaped pipes kept inside their cell)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def mask_cuda(lines):
    out, cuda_col = [], None
    for line in lines:
        if line.startswith("|"):
            c = cells(line)
            if cuda_col is None and "CUDA" in c:
                cuda_col = c.index("CUDA")
            if cuda_col is not None and cuda_col < len(c) and not set(c[cuda_col]) <= set("-"):
                c[cuda_col] = "(cuda)"
                line = "| " + " | ".join(c) + " |"
        out.append(line)
    return out


def check_doc(memplan, root, update, cuda_built):
    r = memplan_run(memplan, "--markdown")
    check(r.returncode == 0, f"`memplan ops --markdown` exited {r.returncode}: {r.stderr.strip()}")
    doc = os.path.join(root, "docs", "ops.md")
    if update:
        with open(doc, "w") as f:
            f.write(r.stdout)
        print(f"wrote {doc}")
        return
    with open(doc) as f:
        have = f.read().splitlines()
    want = r.stdout.splitlines()
    if not cuda_built:
        print("note: built without the CUDA backend; the CUDA column is not compared")
        have, want = mask_cuda(have), mask_cuda(want)
    for k in range(max(len(have), len(want))):
        h = have[k] if k < len(have) else "<end of file>"
        w = want[k] if k < len(want) else "<end of output>"
        if h != w:
            check(False, f"docs/ops.md is not current (regenerate: memplan ops --markdown > docs/ops.md); first "
                         f"difference at line {k + 1}:\n  docs/ops.md: {h}\n  generated:   {w}")
            return


def check_json(memplan):
    r = memplan_run(memplan, "--json")
    check(r.returncode == 0, f"`memplan ops --json` exited {r.returncode}: {r.stderr.strip()}")
    ops = json.loads(r.stdout)
    check(isinstance(ops, list) and len(ops) > 0, "--json is not a non-empty array")
    keys = [(o.get("domain"), o.get("op")) for o in ops]
    check(keys == sorted(keys), "--json ops are not sorted by domain and op")
    check(len(set(keys)) == len(keys), "--json lists an op twice")
    for o in ops:
        name = f"{o.get('domain')}::{o.get('op')}"
        for field in ("op", "domain", "kind", "shape", "cost", "backward", "deterministic", "cpu", "cuda"):
            check(field in o, f"{name}: --json object lacks '{field}'")
        check(o.get("shape") in ("rule", "declared", "none"), f"{name}: shape is {o.get('shape')!r}")
        check(o.get("backward") in ("rule", "not_differentiable", "none"), f"{name}: backward is {o.get('backward')!r}")
        check(isinstance(o.get("cost"), bool) and isinstance(o.get("cpu"), bool), f"{name}: cost/cpu not booleans")
        check(o.get("cuda") is None or isinstance(o.get("cuda"), bool), f"{name}: cuda is {o.get('cuda')!r}")
        check(isinstance(o.get("kind"), str) and o.get("kind"), f"{name}: no kind")
        # cpu_dtypes: the dtypes of input 0 the CPU kernel accepts, null exactly when there is no CPU kernel.
        dts = o.get("cpu_dtypes")
        check((dts is None) == (not o["cpu"]), f"{name}: cpu_dtypes {dts!r} with cpu {o['cpu']}")
        check(dts is None or (isinstance(dts, list) and dts and all(isinstance(d, str) for d in dts)),
              f"{name}: cpu_dtypes is {dts!r}")
    by_name = {(o["domain"], o["op"]): o for o in ops}
    add = by_name.get(("ai.onnx", "Add"))
    check(add is not None and {"float32", "int64"} <= set(add["cpu_dtypes"] or []), "Add's CPU kernel lacks float32/int64")
    relu = by_name.get(("ai.onnx", "Relu"))
    check(relu is not None and "float32" in (relu["cpu_dtypes"] or []), "Relu's CPU kernel lacks float32")
    t = memplan_run(memplan)
    check(t.returncode == 0, f"`memplan ops` exited {t.returncode}")
    check(t.stdout.strip().endswith(f"{len(ops)} ops"), "text listing does not end with the op count of --json")
    return ops


def lacks(o, cuda_built):
    missing = []
    if o["shape"] == "none":
        missing.append("shape rule")
    if not o["cost"]:
        missing.append("cost")
    if o["backward"] == "none":
        missing.append("backward")
    if not o["cpu"]:
        missing.append("CPU kernel")
    if cuda_built and not o["cuda"]:
        missing.append("CUDA kernel")
    return missing


def check_model(memplan, ops, cuda_built):
    try:
        from onnx import TensorProto, helper
    except ImportError:
        print("skip: onnx is not installed (the model part is not checked)")
        return False
    onnx_ops = [o for o in ops if o["domain"] == "ai.onnx"]
    lacking = next((o for o in onnx_ops if o["backward"] == "none"), None) or \
        next((o for o in onnx_ops if lacks(o, cuda_built)), None)
    complete = next((o for o in onnx_ops if not lacks(o, cuda_built)), None)
    F = TensorProto.FLOAT
    nodes = [helper.make_node("NoSuchOpInMemplan", ["x"], ["a"], name="u1"),
             helper.make_node("NoSuchOpInMemplan", ["a"], ["b"], name="u2"),
             helper.make_node("Fancy", ["b"], ["c"], name="u3", domain="com.example")]
    last = "c"
    if lacking:
        nodes.append(helper.make_node(lacking["op"], [last], ["d"], name="l1"))
        last = "d"
    if complete:
        nodes.append(helper.make_node(complete["op"], [last], ["e"], name="k1"))
        last = "e"
    g = helper.make_graph(nodes, "gaps", [helper.make_tensor_value_info("x", F, ["batch", 4])],
                          [helper.make_tensor_value_info(last, F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    m.ir_version = 8
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gaps.onnx")
        with open(path, "wb") as f:
            f.write(m.SerializeToString())
        # No --dim: op types need no shapes, so the unbound 'batch' is no error.
        r = memplan_run(memplan, path, "--json")
        check(r.returncode == 0, f"`memplan ops MODEL --json` exited {r.returncode}: {r.stderr.strip()}")
        if r.returncode != 0:
            return True
        rep = json.loads(r.stdout)
        check(len(rep) == 1 and rep[0]["ops"] == len(nodes), f"model report: {rep}")
        unknown = {(u["domain"], u["op"]): u["count"] for u in rep[0]["unknown"]}
        check(unknown == {("ai.onnx", "NoSuchOpInMemplan"): 2, ("com.example", "Fancy"): 1},
              f"unknown ops reported as {unknown}")
        listed = {(x["domain"], x["op"]): x for x in rep[0]["lacking"]}
        if lacking:
            x = listed.get(("ai.onnx", lacking["op"]))
            check(x is not None, f"{lacking['op']} lacks {lacks(lacking, cuda_built)} but is not reported")
            if x:
                check(x["count"] == 1 and x["missing"] == lacks(lacking, cuda_built),
                      f"{lacking['op']} reported as {x}, expected missing {lacks(lacking, cuda_built)}")
        else:
            print("note: no ai.onnx op lacks anything; only unknown ops are checked")
        if complete:
            check(("ai.onnx", complete["op"]) not in listed, f"{complete['op']} lacks nothing but is reported")
        t = memplan_run(memplan, path)
        check(t.returncode == 0, f"`memplan ops MODEL` exited {t.returncode}")
        body = [ln.split() for ln in t.stdout.splitlines() if ln.startswith("  ") and not ln.strip().startswith("status")]
        check(body and all(b[0] == "unknown" for b in body[:2]) and body[0][1] == "NoSuchOpInMemplan",
              f"text report does not list the unknown ops first:\n{t.stdout}")
        bad = memplan_run(memplan, path, "--dim", "batch=zero")
        check(bad.returncode == 2, f"a bad --dim exited {bad.returncode}, expected 2 (usage)")
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=True)
    ap.add_argument("--update", action="store_true", help="rewrite docs/ops.md from this build")
    a = ap.parse_args()
    root = os.path.dirname(os.path.abspath(a.samples))
    ops = check_json(a.memplan)
    cuda_built = any(o.get("cuda") is not None for o in ops)
    check_doc(a.memplan, root, a.update, cuda_built)
    check_model(a.memplan, ops, cuda_built)
    if FAILS:
        print(f"{len(FAILS)} failure(s)")
        sys.exit(1)
    print(f"ok: {len(ops)} ops, docs/ops.md current, model gaps reported")


if __name__ == "__main__":
    main()
