"""Plans are byte-identical to the checked-in fingerprints: a refactor that changes no behaviour changes no plan.

Each case runs `memplan analyze|plan ... --save-plan FILE` on a sample model and hashes the written plan (SHA-256 of
its bytes). Every case runs twice: with --no-fuse (the graph as imported; these fingerprints predate fusion
in planning and must not move when only fusion changes) and with default fusion. samples/plan_fingerprints.txt
holds one line per run: `<sha256> <case name> [--no-fuse]` or `<sha256> <case name> [fused]`. A change that is
meant to change plans regenerates the list with `--update` and says why in its commit.
"""
import argparse
import hashlib
import os
import subprocess
import sys
import tempfile

# (name, arguments after the model path); models are under samples/models. Each runs as both MODES.
# Budgeted cases plan with --library-bytes 0: the budget is all the planner's, as when they were recorded.
CASES = [
    ("analyze tiny_mlp", ["analyze", "tiny_mlp.onnx"]),
    ("analyze tiny_cnn", ["analyze", "tiny_cnn.onnx"]),
    ("analyze tiny_gpt", ["analyze", "tiny_gpt.onnx"]),
    ("analyze squeezenet1_1", ["analyze", "squeezenet1_1.onnx"]),
    ("analyze resnet50 b32", ["analyze", "resnet50.dyn.onnx", "--dim", "batch=32"]),
    ("analyze mobilenet_v2 b8", ["analyze", "mobilenet_v2.dyn.onnx", "--dim", "batch=8"]),
    ("analyze vgg16 b4", ["analyze", "vgg16.dyn.onnx", "--dim", "batch=4"]),
    ("analyze bert_base b8 s128", ["analyze", "bert_base.dyn.onnx", "--dim", "batch=8", "--dim", "seq=128"]),
    ("analyze distilbert b4 s64", ["analyze", "distilbert.dyn.onnx", "--dim", "batch=4", "--dim", "seq=64"]),
    ("train tiny_mlp sgd", ["plan", "tiny_mlp.onnx", "--train", "--optimizer", "sgd"]),
    ("train tiny_cnn adam", ["plan", "tiny_cnn.onnx", "--train", "--optimizer", "adam"]),
    ("train tiny_gpt momentum", ["plan", "tiny_gpt.onnx", "--train", "--optimizer", "momentum"]),
    ("train resnet18 b8 none", ["plan", "resnet18.train.onnx", "--train", "--dim", "batch=8"]),
    ("train resnet18 b8 sqrt", ["plan", "resnet18.train.onnx", "--train", "--dim", "batch=8", "--budget", "1GiB",
                                "--strategy", "sqrt", "--library-bytes", "0"]),
    ("train resnet18 b8 optimal", ["plan", "resnet18.train.onnx", "--train", "--dim", "batch=8", "--budget",
                                   "250MiB", "--strategy", "optimal", "--library-bytes", "0"]),
    ("train mobilenet_v2 b4 swap", ["plan", "mobilenet_v2.train.onnx", "--train", "--dim", "batch=4", "--budget",
                                    "310MiB", "--strategy", "swap", "--library-bytes", "0"]),
    ("train mobilenet_v2 b4 auto", ["plan", "mobilenet_v2.train.onnx", "--train", "--dim", "batch=4", "--budget",
                                    "200MiB", "--strategy", "auto", "--library-bytes", "0"]),
    ("train resnet50 b4 budget", ["plan", "resnet50.train.onnx", "--train", "--dim", "batch=4", "--budget", "500MiB",
                                  "--strategy", "budget", "--library-bytes", "0"]),
    ("train bert_base b2 s64 adam", ["plan", "bert_base.dyn.onnx", "--train", "--dim", "batch=2", "--dim", "seq=64",
                                     "--optimizer", "adam"]),
    ("train distilbert b2 s64 sgd", ["plan", "distilbert.dyn.onnx", "--train", "--dim", "batch=2", "--dim", "seq=64",
                                    "--optimizer", "sgd"]),
]


MODES = [("--no-fuse", ["--no-fuse"]), ("fused", [])]


def fingerprint(memplan, samples, args, tmp):
    out = os.path.join(tmp, "plan.json")
    cmd = [memplan, args[0], os.path.join(samples, "models", args[1])] + args[2:] + ["--save-plan", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    with open(out, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=True)
    ap.add_argument("--update", action="store_true", help="rewrite the fingerprint list from this build")
    a = ap.parse_args()
    path = os.path.join(a.samples, "plan_fingerprints.txt")
    with tempfile.TemporaryDirectory() as tmp:
        got = {f"{name} [{mode}]": fingerprint(a.memplan, a.samples, args + extra, tmp)
               for name, args in CASES for mode, extra in MODES}
    if a.update:
        with open(path, "w") as f:
            f.writelines(f"{h} {name}\n" for name, h in got.items())
        print(f"wrote {len(got)} fingerprints to {path}")
        return 0
    want = {}
    with open(path) as f:
        for line in f:
            h, name = line.rstrip("\n").split(" ", 1)
            want[name] = h
    failed = 0
    for name, h in got.items():
        if name not in want:
            print(f"FAIL: case '{name}' has no checked-in fingerprint (run with --update)")
            failed += 1
        elif want[name] != h:
            print(f"FAIL: the plan of '{name}' changed: {h} != checked-in {want[name]}")
            failed += 1
    for name in want:
        if name not in got:
            print(f"FAIL: checked-in case '{name}' is no longer run")
            failed += 1
    print(f"{len(got) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
