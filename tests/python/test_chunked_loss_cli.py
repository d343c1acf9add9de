#!/usr/bin/env python3
"""`--chunked-loss`: a language model's head (MatMul, or the transposed MatMulT a weight's Transpose fuses into, plus a
bias) and its cross-entropy as one LinearCrossEntropy over chunks of rows. `memplan train` on the CPU gives the
unchunked step's loss and every weight gradient (float32: within 1e-6 and 2e-5 relative; bf16 autocast: the loss
within 1%); `memplan plan --train` verifies its plan, whose arena and PyTorch prediction are below the unchunked
step's by at least a third of the logits, and the unchunked plan's what-if (`pytorch_peak_bytes_chunked_loss`) is the
chunked step's prediction; the chunk's buffers are planned as the op's scratch; what it cannot chunk
(another loss, an output no MatMul makes) is a usage error (exit 2) naming why. Exit 77 when onnx or numpy is
missing."""
import json
import os
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
    from onnx import TensorProto, helper, numpy_helper
except ImportError:
    print("skip: onnx or numpy missing")
    sys.exit(77)

USAGE = 2
B, S, K, V = 4, 64, 32, 3000


def lm(path, transposed_head, bias=True):
    """ids [B, S] -> embedding -> tanh(x W1) -> logits through the head: x Wh (+ b), Wh [K, V]; or x Transpose(E) with
    the embedding E [V, K] tied as the head (as GPT-2's)."""
    rng = np.random.RandomState(3)
    inits = {"emb": rng.randn(V, K) * 0.5, "w1": rng.randn(K, K) * 0.3, "head": rng.randn(K, V) * 0.3, "b": rng.randn(V) * 0.1}
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["x"]), helper.make_node("MatMul", ["x", "w1"], ["h0"]),
             helper.make_node("Tanh", ["h0"], ["h"])]
    if transposed_head:
        nodes.append(helper.make_node("Transpose", ["emb"], ["embT"], perm=[1, 0]))
        nodes.append(helper.make_node("MatMul", ["h", "embT"], ["mm"]))
        del inits["head"]
    else:
        nodes.append(helper.make_node("MatMul", ["h", "head"], ["mm"]))
    if bias:
        nodes.append(helper.make_node("Add", ["mm", "b"], ["logits"]))
    else:
        nodes[-1].output[0] = "logits"
        del inits["b"]
    g = helper.make_graph(nodes, "lm", [helper.make_tensor_value_info("ids", TensorProto.INT64, [B, S])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, S, V])],
                          [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path,
                    save_as_external_data=True, location=os.path.basename(path) + ".bin", size_threshold=0)
    return path


def memplan(*args):
    return subprocess.run([A.memplan, *args], capture_output=True, text=True, timeout=300)


def train(d, model, name, *extra):
    out = os.path.join(d, name)
    r = memplan("train", model, "--loss", "ce", "--lr", "0", "--steps", "1", "--json", "--save-grads", out, *extra)
    if not check(r.returncode == 0, f"{name}: train exit {r.returncode} {r.stderr.strip()[-300:]}"):
        return None, None
    grads = {f: np.load(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".npy")}
    return json.loads(r.stdout)["losses"][0], grads


def same_step(d, model, label):
    loss, grads = train(d, model, label + "_plain")
    closs, cgrads = train(d, model, label + "_chunked", "--chunked-loss")
    if loss is None or closs is None:
        return
    check(abs(closs - loss) <= 1e-6 * abs(loss), f"{label}: chunked loss {closs} vs {loss}")
    check(sorted(grads) == sorted(cgrads), f"{label}: the same weights get gradients ({sorted(grads)} vs {sorted(cgrads)})")
    worst = 0.0
    for f in grads:
        if f in cgrads and grads[f].shape == cgrads[f].shape:
            worst = max(worst, float(np.abs(grads[f] - cgrads[f]).max() / max(np.abs(grads[f]).max(), 1e-12)))
    check(worst <= 2e-5, f"{label}: gradients within {worst:.3g} relative of the unchunked step's")
    bl, _ = train(d, model, label + "_bf16_plain", "--precision", "bf16")
    bc, _ = train(d, model, label + "_bf16_chunked", "--precision", "bf16", "--chunked-loss")
    if bl is not None and bc is not None:
        check(abs(bc - bl) <= 1e-2 * abs(bl), f"{label} bf16: chunked loss {bc} vs {bl}")
    print(f"{label}: loss {closs:.6f} (unchunked {loss:.6f}), gradients within {worst:.2g}")


def smaller_plans(model, label):
    logits = B * S * V * 4
    for extra in ([], ["--optimizer", "adamw", "--precision", "bf16"]):
        plain = memplan("plan", model, "--train", "--loss", "ce", "--json", *extra)
        chunked = memplan("plan", model, "--train", "--loss", "ce", "--chunked-loss", "--json", *extra)
        if not check(plain.returncode == 0 and chunked.returncode == 0, f"{label} {extra}: plans ({chunked.stderr.strip()[-300:]})"):
            continue
        p, c = json.loads(plain.stdout), json.loads(chunked.stdout)
        check(c["plan_valid"], f"{label} {extra}: the chunked plan verifies")
        check(c["arena_bytes"] + logits // 3 <= p["arena_bytes"], f"{label} {extra}: arena {c['arena_bytes']} vs {p['arena_bytes']}")
        check(c["pytorch_peak_bytes"] + logits // 3 <= p["pytorch_peak_bytes"],
              f"{label} {extra}: PyTorch's predicted peak {c['pytorch_peak_bytes']} vs {p['pytorch_peak_bytes']}")
        check(0 < c["scratch_bytes"] <= logits // 2, f"{label} {extra}: the chunk's buffers are the op's scratch ({c['scratch_bytes']})")
        check(p["pytorch_peak_bytes_chunked_loss"] == c["pytorch_peak_bytes"] and c["pytorch_peak_bytes_chunked_loss"] is None,
              f"{label} {extra}: the unchunked plan's what-if ({p['pytorch_peak_bytes_chunked_loss']}) is the chunked step's "
              f"prediction ({c['pytorch_peak_bytes']})")
        print(f"{label} {extra}: arena {p['arena_bytes']} -> {c['arena_bytes']}, PyTorch {p['pytorch_peak_bytes']} -> "
              f"{c['pytorch_peak_bytes']}")


def refusals(d, model):
    r = memplan("plan", model, "--train", "--loss", "mse", "--chunked-loss")
    check(r.returncode == USAGE and "--chunked-loss needs --loss ce" in r.stderr, f"--chunked-loss with mse: exit {r.returncode} {r.stderr.strip()[:200]}")
    relu = os.path.join(d, "relu_out.onnx")
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), relu)
    r = memplan("plan", relu, "--train", "--loss", "ce", "--chunked-loss")
    check(r.returncode == USAGE and "is not made by a MatMul" in r.stderr, f"--chunked-loss on a Relu output: exit {r.returncode} {r.stderr.strip()[:200]}")
    r = memplan("plan", relu, "--train", "--loss", "ce", "--json")
    check(r.returncode == 0 and json.loads(r.stdout)["pytorch_peak_bytes_chunked_loss"] is None,
          f"a Relu output: no chunked what-if ({r.stdout[:100] if r.returncode == 0 else r.stderr.strip()[:200]})")


def main():
    with tempfile.TemporaryDirectory() as d:
        head = lm(os.path.join(d, "head.onnx"), False)
        tied = lm(os.path.join(d, "tied.onnx"), True, bias=False)
        same_step(d, head, "head with bias")
        same_step(d, tied, "tied transposed head")
        smaller_plans(head, "head with bias")
        smaller_plans(tied, "tied transposed head")
        refusals(d, head)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
