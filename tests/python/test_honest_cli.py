#!/usr/bin/env python3
"""Honest answers (docs/training-recipes.md): one check per message the commands give.

- test_dim_names_no_symbolic_dim: a --dim naming no symbolic dim is a usage error listing the model's
  symbolic dims and its fixed batch.
- test_fit_vary_fixed_dim: fit --vary on a fixed dim is the same usage error, not a maximum of --max-value.
- test_eval_export_warning: training from an eval-mode export warns (and still plans), pointing to the README
  section; training exports and models with neither BatchNorm nor Dropout get no warning.
- test_budget_defaults_to_auto: --budget without --strategy plans auto; without a budget, none.
- test_infeasible_names_closest: an infeasible budget names the strategy that comes closest and by how much.
- test_device_memory_fits: analyze --budget and plan (text and JSON) give the total part by part and fits.
- test_one_peak: peak = persistent + inputs + arena in analyze, plan, viz; the live peak is the picture's.
- test_step_time_consistent: plan, viz and trace state one step estimate against keep-all, swap stalls in.
- test_recompute_swap_lists: plan lists the recomputed and swapped tensors with the layers that make them.
- test_fit_samples_per_second: fit gives samples/s per strategy.
- test_names_whole: analyze prints names whole.
Exit 77 when memplan or the samples are missing.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

from viz_testlib import check, cli_args, failures, run

GiB = 1024.0 ** 3
PARTS = ["weights", "optimizer state", "graph inputs", "activation arena", "conv scratch", "libraries"]
PART_KEYS = ["weights_bytes", "optimizer_state_bytes", "other_persistent_bytes", "input_bytes", "activation_arena_bytes"]


def call(memplan, *args):
    return subprocess.run([memplan, *args], capture_output=True, text=True)


def make_models(tmp):
    """Small ONNX models: a fixed batch with a symbolic seq, eval-mode BatchNorm and Dropout, a training Dropout."""
    try:
        import numpy as np
        import onnx
        from onnx import TensorProto as T, helper as h, numpy_helper as nh
    except ImportError:
        return None

    def save(name, nodes, x, y, inits):
        g = h.make_graph(nodes, name, [h.make_tensor_value_info("x", T.FLOAT, x)], [h.make_tensor_value_info("y", T.FLOAT, y)], inits)
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
        m.ir_version = 8
        path = os.path.join(tmp, name + ".onnx")
        onnx.save(m, path)
        return path

    w = nh.from_array(np.full((8, 8), 0.1, np.float32), "lin.weight")
    ratio = nh.from_array(np.array(0.1, np.float32), "ratio")
    mode = nh.from_array(np.array(True), "training_mode")
    stats = [nh.from_array(np.ones(4, np.float32), n) for n in ("bn.weight", "bn.bias", "bn.running_mean", "bn.running_var")]
    return {
        "seq": save("seq_fixed_batch", [h.make_node("MatMul", ["x", "lin.weight"], ["m"], name="/lin/MatMul"),
                                        h.make_node("Relu", ["m"], ["y"], name="/relu/Relu")], [32, "seq", 8], [32, "seq", 8], [w]),
        "bn_eval": save("bn_eval", [h.make_node("Conv", ["x", "conv.weight"], ["c"], name="/conv/Conv", pads=[1, 1, 1, 1]),
                                    h.make_node("BatchNormalization", ["c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"],
                                                ["b"], name="/bn/BatchNormalization"),
                                    h.make_node("Relu", ["b"], ["y"], name="/relu/Relu")],
                        ["batch", 3, 8, 8], ["batch", 4, 8, 8], [nh.from_array(np.full((4, 3, 3, 3), 0.1, np.float32), "conv.weight")] + stats),
        "dropout_eval": save("dropout_eval", [h.make_node("MatMul", ["x", "lin.weight"], ["m"], name="/lin/MatMul"),
                                              h.make_node("Dropout", ["m"], ["y"], name="/drop/Dropout")],
                             ["batch", 8], ["batch", 8], [w]),
        "dropout_off": save("dropout_off", [h.make_node("MatMul", ["x", "lin.weight"], ["m"], name="/lin/MatMul"),
                                            h.make_node("Dropout", ["m", "ratio", "training_mode"], ["y"], name="/drop/Dropout")],
                            ["batch", 8], ["batch", 8], [w, ratio, nh.from_array(np.array(False), "training_mode")]),
        "dropout_train": save("dropout_train", [h.make_node("MatMul", ["x", "lin.weight"], ["m"], name="/lin/MatMul"),
                                                h.make_node("Dropout", ["m", "ratio", "training_mode"], ["y", "mask"], name="/drop/Dropout")],
                              ["batch", 8], ["batch", 8], [w, ratio, mode]),
    }


def test_dim_names_no_symbolic_dim(memplan, samples, models):
    r = call(memplan, "plan", models["seq"], "--train", "--dim", "batch=64")
    check(r.returncode == 2, f"--dim batch on a fixed batch exited {r.returncode}, expected 2 (usage)")
    for words in ("no symbolic dim 'batch'", "its symbolic dims: seq", "its batch is fixed at 32"):
        check(words in r.stderr, f"--dim batch=64 on a fixed batch: {words!r} not in {r.stderr.strip()!r}")
    r = call(memplan, "analyze", os.path.join(samples, "models", "resnet18.onnx"), "--dim", "batch=8")
    check(r.returncode == 2 and "its symbolic dims: none" in r.stderr and "its batch is fixed at 1" in r.stderr,
          f"analyze resnet18.onnx --dim batch=8: {r.returncode} {r.stderr.strip()!r}")
    r = call(memplan, "analyze", os.path.join(samples, "models", "resnet18.dyn.onnx"), "--dim", "batch=2", "--dim", "seq=16")
    check(r.returncode == 2 and "no symbolic dim 'seq'" in r.stderr and "its symbolic dims: batch" in r.stderr and "fixed" not in r.stderr,
          f"--dim seq on a CNN: {r.returncode} {r.stderr.strip()!r}")
    check(call(memplan, "plan", models["seq"], "--train", "--dim", "seq=4").returncode == 0, "--dim seq=4, a symbolic dim, failed")


def test_fit_vary_fixed_dim(memplan, samples, models):
    r = call(memplan, "fit", models["seq"], "--budget", "1GiB", "--vary", "batch", "--strategies", "none", "--json")
    check(r.returncode == 2 and "no symbolic dim 'batch'" in r.stderr and "fixed at 32" in r.stderr,
          f"fit --vary batch on a fixed batch: exit {r.returncode}, stdout {r.stdout[:80]!r}, stderr {r.stderr.strip()!r}")
    r = call(memplan, "fit", os.path.join(samples, "models", "tiny_cnn.onnx"), "--budget", "1GiB", "--strategies", "none")
    check(r.returncode == 2 and "65536" not in r.stdout, f"fit tiny_cnn (fixed batch 2): exit {r.returncode}: {r.stdout[:200]!r}")
    j = json.loads(run(memplan, "fit", models["seq"], "--budget", "1GiB", "--vary", "seq", "--strategies", "none", "--max-value", "64", "--json"))
    check(j["strategies"]["none"]["max_seq"] == 64, f"fit --vary seq (symbolic): {j['strategies']['none']}")


def test_eval_export_warning(memplan, samples, models):
    readme = os.path.join(os.path.dirname(os.path.abspath(samples)), "README.md")
    if os.path.exists(readme):
        with open(readme) as f:
            check("\n## Exporting from PyTorch for memplan\n" in f.read(), "README.md has no section 'Exporting from PyTorch for memplan'")
    eval_cases = [("tiny_cnn (BatchNorm folded into Conv)", [os.path.join(samples, "models", "tiny_cnn.onnx")], "folded"),
                  ("inference BatchNormalization", [models["bn_eval"], "--dim", "batch=2"], "BatchNormalization in inference form"),
                  ("Dropout(x) alone", [models["dropout_eval"], "--dim", "batch=2"], "Dropout in inference mode"),
                  ("Dropout with training_mode false", [models["dropout_off"], "--dim", "batch=2"], "Dropout in inference mode")]
    for what, args, sign in eval_cases:
        for cmd in (["plan", args[0], "--train"] + args[1:], ["fit", args[0], "--budget", "1GiB", "--strategies", "none", "--max-value", "4"]
                    + [a for a in args[1:] if a != "--dim" and not a.startswith("batch=")]):
            if cmd[0] == "fit" and "--dim" not in args:
                continue  # tiny_cnn has no symbolic dim to vary
            r = call(memplan, *cmd)
            check(r.returncode == 0, f"{cmd[0]} {what}: exited {r.returncode}: {r.stderr.strip()}")
            check("warning" in r.stderr and "eval-mode export" in r.stderr and sign in r.stderr
                  and "Exporting from PyTorch for memplan" in r.stderr, f"{cmd[0]} {what}: no eval-mode warning: {r.stderr.strip()!r}")
    quiet = [[os.path.join(samples, "models", "resnet18.train.onnx"), "--dim", "batch=1"],
             [os.path.join(samples, "models", "tiny_mlp.onnx")],
             [models["dropout_train"], "--dim", "batch=2"]]
    for t in ("bert_small.train.onnx", "llama_gqa.sdpa18.train.onnx"):  # the second has SDPA's Dropout(x, ratio)
        path = os.path.join(samples, "transformers", t)
        if os.path.exists(path):
            quiet.append([path, "--dim", "batch=1", "--dim", "seq=16"])
    for args in quiet:
        r = call(memplan, "plan", args[0], "--train", *args[1:])
        check(r.returncode == 0 and "warning" not in r.stderr, f"plan {os.path.basename(args[0])}: {r.returncode} {r.stderr.strip()!r}")


def test_budget_defaults_to_auto(memplan, samples, models):
    rn = os.path.join(samples, "models", "resnet18.train.onnx")
    j = json.loads(run(memplan, "plan", rn, "--train", "--dim", "batch=2", "--budget", "2GiB", "--json"))
    check(j["strategy"] == "auto", f"--budget without --strategy planned {j['strategy']!r}, expected auto")
    j = json.loads(run(memplan, "plan", rn, "--train", "--dim", "batch=2", "--json"))
    check(j["strategy"] == "none", f"no --budget, no --strategy planned {j['strategy']!r}, expected none")


def test_infeasible_names_closest(memplan, samples, models):
    rn = os.path.join(samples, "models", "resnet18.train.onnx")
    budget_gib = 0.1953125  # 200 MiB
    r = call(memplan, "plan", rn, "--train", "--dim", "batch=8", "--budget", "200MiB", "--strategy", "optimal")
    check(r.returncode == 9, f"an infeasible budget exited {r.returncode}, expected 9")
    least = {s: float(v) for s, v in re.findall(r" (none|sqrt|budget|optimal|swap|auto) ([0-9.]+) GiB[,;]", r.stderr)}
    m = re.search(r"closest: (\w+) at ([0-9.]+) GiB, ([0-9.]+) GiB \(([0-9.]+)%\) over the budget", r.stderr)
    if check(m is not None and len(least) == 6, f"the message names no closest strategy or lacks one: {r.stderr.strip()!r}"):
        best = min(least.values())
        check(least[m.group(1)] == best and float(m.group(2)) == best, f"closest {m.group(1)} at {m.group(2)}, least is {best}: {least}")
        check(abs(float(m.group(3)) - (best - budget_gib)) <= 0.0015, f"over by {m.group(3)} GiB, expected {best - budget_gib:.3f}")
        check(abs(float(m.group(4)) - 100 * (best - budget_gib) / budget_gib) <= 0.7, f"over by {m.group(4)}%")


def check_device_memory_json(j, budget, where):
    parts = sum(j[k] for k in PART_KEYS)
    check(j["peak_bytes"] == parts, f"{where}: peak_bytes {j['peak_bytes']} != the parts {parts}")
    check(j["total_device_bytes"] == parts + j["library_bytes"], f"{where}: total is not peak + libraries")
    check(j["scratch_in_arena"] is True and j["scratch_bytes"] <= j["activation_arena_bytes"], f"{where}: scratch not within the arena")
    want = None if budget is None else j["total_device_bytes"] <= budget
    check(j["fits"] is want, f"{where}: fits {j['fits']!r}, expected {want!r}")
    check(j["budget_bytes"] == budget, f"{where}: budget_bytes {j['budget_bytes']} != {budget}")


def check_device_memory_text(text, fits, where):
    lines = text.splitlines()
    for part in PARTS:
        check(any(l.startswith("  " + part + " ") for l in lines), f"{where}: no line of its own for {part!r}")
    check(any(l.startswith("  conv scratch") and ("planned in the arena" in l or "none planned" in l) for l in lines),
          f"{where}: conv scratch does not say it is planned in the arena")
    head = [l for l in lines if l.startswith("device memory")]
    if check(len(head) == 1, f"{where}: no 'device memory' line"):
        want = {True: ": FITS the budget", False: ": DOES NOT FIT the budget", None: "give --budget"}[fits]
        check(want in head[0], f"{where}: {head[0]!r} lacks {want!r}")


def test_device_memory_fits(memplan, samples, models):
    dyn = os.path.join(samples, "models", "resnet18.dyn.onnx")
    base = ["analyze", dyn, "--dim", "batch=2"]
    for budget, fits in ((None, None), ("1GiB", True), ("50MiB", False)):
        extra = [] if budget is None else ["--budget", budget]
        j = json.loads(run(memplan, *base, *extra, "--json"))
        b = None if budget is None else {"1GiB": 1 << 30, "50MiB": 50 << 20}[budget]
        check_device_memory_json(j, b, f"analyze {extra}")
        check(j["optimizer_state_bytes"] == 0 and j["peak_bytes"] == j["weights_bytes"] + j["input_bytes"] + j["arena_bytes"],
              f"analyze {extra}: inference peak is not weights + inputs + arena")
        check_device_memory_text(run(memplan, *base, *extra), fits, f"analyze text {extra}")
    j0 = json.loads(run(memplan, *base, "--json", "--library-bytes", "0"))
    j1 = json.loads(run(memplan, *base, "--json"))
    check(j1["total_device_bytes"] - j0["total_device_bytes"] == 69 << 20, "the default --library-bytes is not the stated 69 MiB")
    rn = os.path.join(samples, "models", "resnet18.train.onnx")
    for budget, fits in ((None, None), ("1GiB", True)):
        extra = [] if budget is None else ["--budget", budget]
        j = json.loads(run(memplan, "plan", rn, "--train", "--dim", "batch=2", "--optimizer", "adam", *extra, "--json"))
        check_device_memory_json(j, None if budget is None else 1 << 30, f"plan {extra}")
        check(j["optimizer_state_bytes"] > 0, f"plan adam {extra}: no optimizer state")
        check_device_memory_text(run(memplan, "plan", rn, "--train", "--dim", "batch=2", *extra), fits, f"plan text {extra}")
    # A budget counts the libraries: the same plan with --library-bytes 0 totals 69 MiB less.
    a = json.loads(run(memplan, "plan", rn, "--train", "--dim", "batch=2", "--strategy", "none", "--budget", "1GiB", "--json"))
    check(a["total_device_bytes"] <= 1 << 30 and a["library_bytes"] == 69 << 20, "plan under a budget: total over it or no libraries")


def test_one_peak(memplan, samples, models, tmp):
    mb = os.path.join(samples, "models", "mobilenet_v2.train.onnx")
    args = [mb, "--train", "--dim", "batch=2", "--budget", "300MiB", "--strategy", "optimal"]
    j = json.loads(run(memplan, "plan", *args, "--json"))
    check(j["peak_bytes"] == j["persistent_bytes"] + j["input_bytes"] + j["activation_arena_bytes"], "plan: peak is not persistent + inputs + arena")
    check(j["lower_bound_bytes"] <= j["live_peak_bytes"] + (1 << 20) and j["live_peak_bytes"] <= j["arena_bytes"],
          f"plan: lower bound {j['lower_bound_bytes']}, live peak {j['live_peak_bytes']}, arena {j['arena_bytes']} out of order")
    svg = os.path.join(tmp, "one_peak.svg")
    out = run(memplan, "viz", *args, "-o", svg)
    with open(svg) as f:
        doc = f.read()
    m = re.search(r'data-live-peak-bytes="(\d+)"', doc)
    check(m is not None and int(m.group(1)) == j["live_peak_bytes"], "viz: the drawn live peak is not plan's live_peak_bytes")
    text = run(memplan, "plan", *args)
    peak_text = re.search(r"^peak +(\S+ \S+) = ", text, re.M).group(1)
    check(f"  peak {peak_text} (persistent + inputs + arena)" in out, f"viz states another peak than plan's {peak_text}: {out!r}")
    check(f"peak {peak_text} = persistent" in doc, "the SVG note states another peak than plan's")
    for cmd_out, where in ((text, "plan"), (out, "viz"), (run(memplan, "analyze", os.path.join(samples, "models", "tiny_mlp.onnx")), "analyze")):
        check("activation peak" not in cmd_out and "activation bound" not in cmd_out, f"{where} still names another quantity 'peak'")


def step_phrase(text):
    m = re.search(r"(\d+\.\d+ ms = [+-]\d+\.\d% over keep-all \d+\.\d+ ms)", text)
    return m.group(1) if m else None


def test_step_time_consistent(memplan, samples, models, tmp):
    mb = os.path.join(samples, "models", "mobilenet_v2.train.onnx")
    args = [mb, "--train", "--dim", "batch=4", "--budget", "380MiB", "--strategy", "swap"]
    j = json.loads(run(memplan, "plan", *args, "--json"))
    text = run(memplan, "plan", *args)
    trace = os.path.join(tmp, "step.trace.json")
    tout = run(memplan, "trace", *args, "-o", trace)
    with open(trace) as f:
        other = json.load(f)["otherData"]
    vout = run(memplan, "viz", *args, "-o", os.path.join(tmp, "step.svg"))
    check(j["swapped_tensors"] > 0, "the swap case swaps nothing")
    check(abs(other["estimated_seconds"] - j["estimated_step_seconds"]) <= 1e-9 * j["estimated_step_seconds"],
          f"trace estimates {other['estimated_seconds']} s, plan {j['estimated_step_seconds']} s")
    check(abs(other["swap_stall_seconds"] - j["swap_stall_seconds"]) <= 1e-9 + 1e-9 * j["estimated_step_seconds"], "trace and plan stalls differ")
    check(abs(j["step_overhead"] - (j["estimated_step_seconds"] / j["keep_all_step_seconds"] - 1)) < 1e-12, "step_overhead is not step / keep-all - 1")
    p = step_phrase(text)
    check(p is not None and p == step_phrase(tout) == step_phrase(vout), f"step phrases differ: plan {p!r}, trace {step_phrase(tout)!r}, viz {step_phrase(vout)!r}")
    swap_line = [l for l in text.splitlines() if l.startswith("swapped ")][0]
    if j["swap_stall_seconds"] > 0:
        check("hide" not in swap_line and "waits" in swap_line, f"plan says swaps hide while the estimate stalls: {swap_line!r}")
    else:
        check("hide" in swap_line, f"no stall, yet plan does not say the copies hide: {swap_line!r}")
    check(not re.search(r"\+\d+% (of )?FLOPs", text + vout), "a '+N% FLOPs' time cost is still shown")
    # Keep-all: strategy none's step is the keep-all step itself.
    n = json.loads(run(memplan, "plan", mb, "--train", "--dim", "batch=4", "--json"))
    # The same step summed along another op order (the budgeted plan's file order, none's memory order) may differ
    # in the last bits.
    close = lambda a, b: abs(a - b) <= 1e-12 * max(abs(a), abs(b))
    check(n["estimated_step_seconds"] == n["keep_all_step_seconds"] and close(n["keep_all_step_seconds"], j["keep_all_step_seconds"]),
          "keep-all differs between plans of one model")


def check_list(lst, count, graph_ops, producers, where):
    check(len(lst) == min(20, count), f"{where}: lists {len(lst)} of {count}")
    check([e["bytes"] for e in lst] == sorted((e["bytes"] for e in lst), reverse=True), f"{where}: not largest first")
    for e in lst:
        check(producers.get(e["tensor"]) == e["op"] and graph_ops.get(e["op"]) == e["op_type"],
              f"{where}: {e['tensor']} is not made by {e['op']} ({e['op_type']})")


def test_recompute_swap_lists(memplan, samples, models, tmp):
    for model, budget, strategy, key in (("resnet18.train.onnx", "320MiB", "optimal", "recomputed"),
                                         ("mobilenet_v2.train.onnx", "380MiB", "swap", "swapped")):
        path = os.path.join(samples, "models", model)
        args = [path, "--train", "--dim", "batch=8" if strategy == "optimal" else "batch=4", "--budget", budget, "--strategy", strategy]
        plan_file = os.path.join(tmp, key + ".plan.json")
        j = json.loads(run(memplan, "plan", *args, "--json", "--save-plan", plan_file))
        with open(plan_file) as f:
            g = json.load(f)["graph"]
        ops = {o["name"]: o["type"] for o in g["ops"]}
        producers = {t: o["name"] for o in g["ops"] for t in o.get("outputs", [])}
        count = j[key + "_tensors"]
        check(count > 0, f"{model} {strategy}: nothing {key}")
        check_list(j[key], count, ops, producers, f"{model} {key}")
        text = run(memplan, "plan", *args)
        for e in j[key]:
            check(f"  {e['tensor']}  (made by {e['op']}, {e['op_type']})" in text, f"{model} text does not list {e['tensor']}")


def test_fit_samples_per_second(memplan, samples, models):
    rn = os.path.join(samples, "models", "resnet18.train.onnx")
    args = ["fit", rn, "--budget", "1GiB", "--strategies", "none", "sqrt", "--max-value", "16"]
    j = json.loads(run(memplan, *args, "--json"))
    for s, e in j["strategies"].items():
        if check(e["max_batch"] > 0, f"fit {s}: nothing fits"):
            want = e["max_batch"] / e["estimated_step_seconds"]
            check(abs(e["samples_per_second"] - want) <= 1e-9 * want, f"fit {s}: samples/s {e['samples_per_second']} != {want}")
    text = run(memplan, *args)
    check("samples/s" in text, "fit text has no samples/s column")
    for s, e in j["strategies"].items():
        row = [l for l in text.splitlines() if l.split()[:1] == [s]]
        check(row and f"{e['samples_per_second']:.1f}" in row[0], f"fit text row of {s} lacks its samples/s")


def test_names_whole(memplan, samples, models):
    # MobileNet-V2's exporter names run past the 40 characters analyze used to cut them to.
    model, dims = os.path.join(samples, "models", "mobilenet_v2.dyn.onnx"), ["--dim", "batch=1"]
    j = json.loads(run(memplan, "analyze", model, *dims, "--json", "--top", "30"))
    text = run(memplan, "analyze", model, *dims, "--top", "30")
    listed = j["live_at_live_peak"][:30]
    check(any(len(e["tensor"]) > 40 for e in listed), "no long name to check")
    for e in listed:
        check(f"  {e['tensor']} " in text and f"{e['producer']} ({e['producer_type']})" in text, f"analyze cuts {e['tensor']!r}")


def main():
    a = cli_args()
    if a is None:
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        models = make_models(tmp)
        if models is None:
            print("skip: onnx or numpy missing")
            return 77
        tests = [test_dim_names_no_symbolic_dim, test_fit_vary_fixed_dim, test_eval_export_warning, test_budget_defaults_to_auto,
                 test_infeasible_names_closest, test_device_memory_fits, test_fit_samples_per_second, test_names_whole]
        with_tmp = [test_one_peak, test_step_time_consistent, test_recompute_swap_lists]
        for t in tests + with_tmp:
            before = len(failures)
            try:
                t(a.memplan, a.samples, models, tmp) if t in with_tmp else t(a.memplan, a.samples, models)
            except (RuntimeError, KeyError, IndexError, AttributeError, ValueError) as e:
                check(False, f"{t.__name__}: {type(e).__name__}: {e}")
            print(("ok   " if len(failures) == before else "FAIL ") + t.__name__)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
