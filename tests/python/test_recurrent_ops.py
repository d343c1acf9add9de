#!/usr/bin/env python3
"""ONNX's recurrent ops (LSTM, GRU, RNN) unrolled over their sequence. `memplan run` equals ONNX Runtime on every
output (Y, Y_h, Y_c) across directions (forward, reverse, bidirectional), layouts 0 and 1, biases, initial states,
peepholes, clip, GRU's linear_before_reset both ways and non-default activations with their alpha and beta; the weight
gradients of `memplan train --loss none` equal central finite differences of the loss ONNX Runtime computes; a
training step of a small recurrent language model plans and verifies in fp32 and under bf16 autocast; what the
unrolling cannot honour (sequence_lens shorter than the sequence, input_forget) is refused naming the node (exit 5),
and malformed ones (inputs of the wrong shape, bad attributes) get errors naming the input or attribute.
MEMPLAN_TEST_BACKEND=cuda runs and trains on the CUDA runtime instead (on the GPU machine). Exit 77 when onnx,
onnxruntime or numpy is missing."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from viz_testlib import check, cli_args, failures

A = cli_args()
if A is None:
    sys.exit(77)
try:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError:
    print("skip: onnx, onnxruntime or numpy missing")
    sys.exit(77)

UNSUPPORTED = 5
BACKEND = ["--backend", os.environ.get("MEMPLAN_TEST_BACKEND", "cpu")]
S, B, I, H = 4, 2, 3, 2
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
RNG = np.random.RandomState(11)


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def weights_of(kind, dirs, bias=True, peephole=False, scale=0.6):
    g = GATES[kind]
    w = {"W": (RNG.randn(dirs, g * H, I) * scale).astype(np.float32), "R": (RNG.randn(dirs, g * H, H) * scale).astype(np.float32)}
    if bias:
        w["B"] = (RNG.randn(dirs, 2 * g * H) * 0.3).astype(np.float32)
    if peephole:
        w["P"] = (RNG.randn(dirs, 3 * H) * 0.3).astype(np.float32)
    return w


def case_inputs(kind, dirs, layout, weights, states):
    """The op's input list: X, W, R, B, sequence_lens (none), initial_h, initial_c, P (names or '')."""
    ins = ["X", "W", "R", "B" if "B" in weights else "", ""]
    ins += ["h0" if states else ""]
    if kind == "LSTM":
        ins += ["c0" if states else "", "P" if "P" in weights else ""]
    while ins and ins[-1] == "":
        ins.pop()
    return ins


def state_shape(dirs, layout):
    return [B, dirs, H] if layout else [dirs, B, H]


def recurrent_model(kind, attrs, weights, states, layout=0, loss=False, opset=17):
    """Outputs Y, Y_h (and Y_c): or, with `loss`, sum(Y * r1) + sum(Y_h * r2) over constant inputs (for `train`)."""
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    outs = ["Y", "Y_h"] + (["Y_c"] if kind == "LSTM" else [])
    op = helper.make_node(kind, case_inputs(kind, dirs, layout, weights, states), outs, name="rnn", hidden_size=H,
                          **({"layout": layout} if layout else {}), **attrs)
    x_shape = [B, S, I] if layout else [S, B, I]
    feeds = {"X": RNG.randn(*x_shape).astype(np.float32)}
    if states:
        feeds["h0"] = RNG.randn(*state_shape(dirs, layout)).astype(np.float32)
        if kind == "LSTM":
            feeds["c0"] = RNG.randn(*state_shape(dirs, layout)).astype(np.float32)
    inits = [numpy_helper.from_array(v, k) for k, v in weights.items()]
    if not loss:
        g = helper.make_graph([op], "g", [vi(k, list(v.shape)) for k, v in feeds.items()], [vi(o, None) for o in outs], inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), feeds
    y_shape = [B, S, dirs, H] if layout else [S, dirs, B, H]
    consts = {**feeds, "r1": np.cos(np.arange(np.prod(y_shape))).reshape(y_shape).astype(np.float32),
              "r2": np.sin(np.arange(dirs * B * H) + 1.0).reshape(state_shape(dirs, layout)).astype(np.float32)}
    nodes = [helper.make_node("Constant", [], [k], value=numpy_helper.from_array(v, k + "_v")) for k, v in consts.items()]
    nodes += [op, helper.make_node("Mul", ["Y", "r1"], ["a"]), helper.make_node("Mul", ["Y_h", "r2"], ["b"]),
              helper.make_node("ReduceSum", ["a"], ["sa"], keepdims=0), helper.make_node("ReduceSum", ["b"], ["sb"], keepdims=0),
              helper.make_node("Add", ["sa", "sb"], ["loss"])]
    g = helper.make_graph(nodes, "g", [], [vi("loss", [])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), feeds


def run_memplan(d, name, model, feeds):
    path = os.path.join(d, name + ".onnx")
    onnx.save(model, path)
    args, outs = [A.memplan, "run", path, *BACKEND], []
    for k, v in feeds.items():
        np.save(os.path.join(d, f"{name}_{k}.npy"), v)
        args += ["--input", os.path.join(d, f"{name}_{k}.npy")]
    for k in range(len(model.graph.output)):
        outs.append(os.path.join(d, f"{name}_out{k}.npy"))
        args += ["-o", outs[-1]]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if not check(r.returncode == 0, f"{name}: run exit {r.returncode} {r.stderr.strip()[-300:]}"):
        return None
    return [np.load(o) for o in outs]


def forward_case(d, name, kind, attrs, weights, states=True, layout=0, opset=17):
    model, feeds = recurrent_model(kind, attrs, weights, states, layout, opset=opset)
    if layout:  # ONNX Runtime runs layout 0 only: the same op time-major, its inputs and outputs transposed
        ref, _ = recurrent_model(kind, attrs, weights, states, 0, opset=opset)
        t = {"X": (1, 0, 2), "h0": (1, 0, 2), "c0": (1, 0, 2)}
        want = ort.InferenceSession(ref.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {k: np.ascontiguousarray(v.transpose(t[k])) for k, v in feeds.items()})
        want = [w.transpose(2, 0, 1, 3) if w.ndim == 4 else w.transpose(1, 0, 2) for w in want]
    else:
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = run_memplan(d, name, model, feeds)
    if got is None:
        return
    worst = 0.0
    for k, (g, w) in enumerate(zip(got, want)):
        diff = float(np.max(np.abs(g.astype(np.float64) - w)))
        worst = max(worst, diff)
        check(g.shape == w.shape and diff <= 2e-5, f"{name}: output {model.graph.output[k].name} {g.shape} vs onnxruntime {w.shape}, max diff {diff:.3g}")
    print(f"{name}: {len(got)} outputs within {worst:.2g} of onnxruntime's")


def ort_loss(kind, attrs, weights, states, layout):
    model, _ = recurrent_model(kind, attrs, weights, states, layout, loss=True)
    return float(ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0])


def gradient_case(d, name, kind, attrs, weights, states=True, layout=0, step=1e-2, tol=3e-3):
    """Weights saved as external data: initializers whose bytes are on disk train in any slot (docs/saved-tensors.md)."""
    RNG.seed(abs(hash(name)) % 2**31)
    model, _ = recurrent_model(kind, attrs, weights, states, layout, loss=True)
    RNG.seed(abs(hash(name)) % 2**31)
    path, out = os.path.join(d, name + "_train.onnx"), os.path.join(d, name + "_grads")
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location=name + ".bin", size_threshold=0)
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run([A.memplan, "train", path, "--loss", "none", "--steps", "1", "--lr", "0", "--save-grads", out, *BACKEND],
                       capture_output=True, text=True, timeout=300)
    if not check(r.returncode == 0, f"{name}: train exit {r.returncode} {r.stderr.strip()[-300:]}"):
        return
    grads = {}
    for f in os.listdir(out):
        if f.endswith(".json"):
            continue
        grads.setdefault(np.load(os.path.join(out, f)).shape, []).append(np.load(os.path.join(out, f)).astype(np.float64))
    worst = 0.0
    for k, v in weights.items():
        fd = np.zeros(v.shape)
        for i in np.ndindex(v.shape):
            lo, hi = dict(weights), dict(weights)
            lo[k], hi[k] = v.copy(), v.copy()
            lo[k][i] -= step
            hi[k][i] += step
            RNG.seed(abs(hash(name)) % 2**31)
            fhi = ort_loss(kind, attrs, hi, states, layout)
            RNG.seed(abs(hash(name)) % 2**31)
            flo = ort_loss(kind, attrs, lo, states, layout)
            fd[i] = (fhi - flo) / (2 * step)
        hits = grads.get(v.shape, [])
        errs = [float(np.max(np.abs(g - fd)) / max(float(np.max(np.abs(fd))), 1e-12)) for g in hits]
        err = min(errs) if errs else float("inf")
        worst = max(worst, err)
        check(err <= tol, f"{name}: d{k} {v.shape} differs from finite differences by {err:.3g} of its largest (tolerance {tol}; "
                          f"{len(hits)} gradients of that shape)")
    print(f"{name}: {len(weights)} weight gradients within {worst:.2g} of finite differences")


def lm_model(d, kind):
    """Token ids -> embedding -> a bidirectional recurrent layer -> a vocabulary head: plan --train, fp32 and bf16."""
    vocab, e, h, seq, batch, g = 50, 8, 16, 12, 3, GATES[kind]
    init = {"emb": RNG.randn(vocab, e), "W": RNG.randn(2, g * h, e) * 0.3, "R": RNG.randn(2, g * h, h) * 0.3,
            "B": RNG.randn(2, 2 * g * h) * 0.1, "head": RNG.randn(2 * h, vocab) * 0.3}
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["x"]),
             helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
             helper.make_node(kind, ["xt", "W", "R", "B"], ["y"], hidden_size=h, direction="bidirectional"),
             helper.make_node("Transpose", ["y"], ["yt"], perm=[2, 0, 1, 3]),
             helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([batch, seq, 2 * h], np.int64), "s")),
             helper.make_node("Reshape", ["yt", "shape"], ["feat"]), helper.make_node("MatMul", ["feat", "head"], ["logits"])]
    g = helper.make_graph(nodes, "lm", [helper.make_tensor_value_info("ids", TensorProto.INT64, [batch, seq])], [vi("logits", None)],
                          [numpy_helper.from_array(v.astype(np.float32), k) for k, v in init.items()])
    path = os.path.join(d, f"{kind}_lm.onnx")
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path,
                    save_as_external_data=True, location=f"{kind}_lm.bin", size_threshold=0)
    return path, seq * batch * 2 * h * 4


def plan_cases(d):
    for kind in GATES:
        path, y_bytes = lm_model(d, kind)
        for precision in ("fp32", "bf16"):
            r = subprocess.run([A.memplan, "plan", path, "--train", "--loss", "ce", "--optimizer", "adamw", "--precision", precision,
                                "--json"], capture_output=True, text=True, timeout=300)
            j = json.loads(r.stdout) if r.returncode == 0 else None
            check(j is not None and j["plan_valid"] and j["arena_bytes"] >= y_bytes // 2,
                  f"{kind} language model, {precision}: a verified training plan ({r.stderr.strip()[-300:]})")
        r = subprocess.run([A.memplan, "train", path, "--loss", "ce", "--steps", "4", "--lr", "0.05", "--json", *BACKEND],
                           capture_output=True, text=True, timeout=300)
        t = json.loads(r.stdout) if r.returncode == 0 else None
        check(t is not None and all(np.isfinite(t["losses"])) and t["losses"][-1] < t["losses"][0],
              f"{kind} language model: the loss falls over 4 steps ({t['losses'] if t else r.stderr.strip()[-300:]})")


def refusals(d):
    w = weights_of("LSTM", 1)
    model, _ = recurrent_model("LSTM", {}, w, False)
    model.graph.node[0].input[:] = ["X", "W", "R", "B", "lens"]
    model.graph.input.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [B]))
    path = os.path.join(d, "lens.onnx")
    onnx.save(model, path)
    r = subprocess.run([A.memplan, "analyze", path], capture_output=True, text=True, timeout=60)
    check(r.returncode == UNSUPPORTED and "'rnn' (LSTM)" in r.stderr and "sequence_lens" in r.stderr,
          f"LSTM with run-time sequence_lens refused naming it: exit {r.returncode} {r.stderr.strip()[:300]}")
    model, _ = recurrent_model("LSTM", {"input_forget": 1}, w, False)
    path = os.path.join(d, "forget.onnx")
    onnx.save(model, path)
    r = subprocess.run([A.memplan, "analyze", path], capture_output=True, text=True, timeout=60)
    check(r.returncode == UNSUPPORTED and "'rnn' (LSTM)" in r.stderr and "input_forget" in r.stderr,
          f"LSTM with input_forget refused naming it: exit {r.returncode} {r.stderr.strip()[:300]}")


def hostile(d):
    """Malformed recurrent ops: each refused with its exit code and a message naming the op and what is wrong."""
    def model(name, w, r, b=None, attrs=None, x=(4, 2, 3), h0=None):
        ins, inits = ["X", "W", "R"], [numpy_helper.from_array(np.zeros(w, np.float32), "W"), numpy_helper.from_array(np.zeros(r, np.float32), "R")]
        if b is not None:
            ins.append("B")
            inits.append(numpy_helper.from_array(np.zeros(b, np.float32), "B"))
        if h0 is not None:
            ins += [""] * (5 - len(ins)) + ["h0"]
            inits.append(numpy_helper.from_array(np.zeros(h0, np.float32), "h0"))
        node = helper.make_node("LSTM", ins, ["Y"], name="rnn", **{"hidden_size": 2, **(attrs or {})})
        g = helper.make_graph([node], "g", [vi("X", list(x))], [vi("Y", None)], inits)
        path = os.path.join(d, f"hostile_{name}.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
        return path
    cases = [("R of another hidden size", model("r", (1, 8, 3), (1, 8, 3)), 7, ["R 'R' is [1, 8, 3], [1, 8, 2] expected"]),
             ("B of half the length", model("b", (1, 8, 3), (1, 8, 2), b=(1, 8)), 7, ["B 'B' is [1, 8], [1, 16] expected"]),
             ("W of another input size", model("w", (1, 8, 5), (1, 8, 2)), 7, ["W 'W' is [1, 8, 5], [1, 8, 3] expected"]),
             ("a zero initial_h of the wrong batch", model("h0", (1, 8, 3), (1, 8, 2), h0=(1, 3, 2)), 7, ["initial_h 'h0'", "[1, 2, 2] expected"]),
             ("hidden_size -2", model("hs", (1, 8, 3), (1, 8, 2), attrs={"hidden_size": -2}), 6, ["hidden_size -2 is not positive"]),
             ("layout 7", model("layout", (1, 8, 3), (1, 8, 2), attrs={"layout": 7}), 6, ["layout 7 is not 0 or 1"]),
             ("direction sideways", model("dir", (1, 8, 3), (1, 8, 2), attrs={"direction": "sideways"}), 6, ["direction 'sideways'"]),
             ("an unknown activation", model("act", (1, 8, 3), (1, 8, 2), attrs={"activations": ["Sigmoid", "Tanh", "Foo"]}), 5,
              ["activation 'Foo'"]),
             ("no time steps", model("seq0", (1, 8, 3), (1, 8, 2), x=(0, 2, 3)), 5, ["has no time steps"]),
             ("a million time steps", model("huge", (1, 8, 3), (1, 8, 2), x=(1000000, 2, 3)), 5, ["over the limit of 100000"])]
    for what, path, code, words in cases:
        r = subprocess.run([A.memplan, "analyze", path], capture_output=True, text=True, timeout=60)
        check(r.returncode == code and "'rnn' (LSTM)" in r.stderr and all(w in r.stderr for w in words),
              f"LSTM with {what}: exit {r.returncode} ({code} expected) {r.stderr.strip()[:300]}")


def main():
    with tempfile.TemporaryDirectory() as d:
        forward_case(d, "lstm_peephole_clip", "LSTM", {"clip": 0.9}, weights_of("LSTM", 1, peephole=True))
        forward_case(d, "lstm_bidirectional_no_bias_zero_state", "LSTM", {"direction": "bidirectional"},
                     weights_of("LSTM", 2, bias=False), states=False)
        forward_case(d, "lstm_reverse_layout1", "LSTM", {"direction": "reverse"}, weights_of("LSTM", 1), layout=1, opset=14)
        forward_case(d, "gru_linear_before_reset", "GRU", {"linear_before_reset": 1, "direction": "bidirectional"},
                     weights_of("GRU", 2))
        forward_case(d, "gru_reset_first", "GRU", {}, weights_of("GRU", 1))
        forward_case(d, "gru_reset_first_zero_state", "GRU", {"direction": "reverse"}, weights_of("GRU", 1), states=False)
        forward_case(d, "rnn_relu", "RNN", {"activations": ["Relu"]}, weights_of("RNN", 1))
        forward_case(d, "rnn_activations_alpha_beta", "RNN",
                     {"direction": "bidirectional", "activations": ["LeakyRelu", "HardSigmoid"], "activation_alpha": [0.3, 0.4],
                      "activation_beta": [0.6]}, weights_of("RNN", 2), layout=1, opset=14)
        gradient_case(d, "grad_lstm_peephole", "LSTM", {}, weights_of("LSTM", 1, peephole=True))
        gradient_case(d, "grad_lstm_bidirectional_zero_state", "LSTM", {"direction": "bidirectional"}, weights_of("LSTM", 2), states=False)
        gradient_case(d, "grad_gru_linear_before_reset", "GRU", {"linear_before_reset": 1}, weights_of("GRU", 1))
        gradient_case(d, "grad_gru_reset_first_reverse", "GRU", {"direction": "reverse"}, weights_of("GRU", 1))
        gradient_case(d, "grad_rnn_tanh", "RNN", {}, weights_of("RNN", 1))
        plan_cases(d)
        refusals(d)
        hostile(d)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
