"""A program that links the library and `memplan plan --train` make the same plan: both build and plan the step through
one entry point (planner/step.hpp), so the sample training loop's plan is byte-identical to the command's for the same
model and options, fused or not.

samples/train_loop.cpp plans tiny models with SGD (lr 0.05) under strategy optimal at a budget halfway between its
keep-all and sqrt peaks (plus the default library bytes) and writes its plan; the command plans the same model with the
same flags. The plans (the graph embedded) must be equal key for key and byte for byte once serialized the same way;
and, so that the comparison can tell plans apart, the command's keep-all plan without fusion must differ from the
sample's.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

MODELS = ("tiny_gpt.onnx", "tiny_mlp.onnx")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def canonical(path, drop=()):
    with open(path) as f:
        j = json.load(f)
    for k in drop:
        j.pop(k, None)
    return json.dumps(j, sort_keys=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", required=True)
    a = ap.parse_args()
    sample = os.path.join(os.path.dirname(os.path.abspath(a.memplan)), "sample_train_loop")
    if not os.path.exists(sample):
        print(f"SKIP: {sample} not built")
        return 77
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for model in MODELS:
            path = os.path.join(a.samples, "models", model)
            mine = os.path.join(tmp, model + ".sample.json")
            out = run([sample, path, "3", mine])
            m = re.search(r"budget (\d+) B", out)
            if not m:
                raise SystemExit(f"FAIL: the sample printed no budget: {out}")
            flags = ["plan", path, "--train", "--optimizer", "sgd", "--lr", "0.05", "--strategy", "optimal",
                     "--budget", m.group(1)]
            cli = os.path.join(tmp, model + ".cli.json")
            run([a.memplan] + flags + ["--save-plan", cli])
            # `plan --save-plan` adds the training summary beside the plan; the plan itself is what the runtime reads.
            same = canonical(mine) == canonical(cli, drop=("training",))
            print(f"{model}: sample and `memplan plan` plans {'identical' if same else 'DIFFER'}")
            if not same:
                failed += 1
            unfused = os.path.join(tmp, model + ".nofuse.json")
            run([a.memplan, "plan", path, "--train", "--optimizer", "sgd", "--lr", "0.05", "--no-fuse", "--save-plan", unfused])
            if canonical(mine) == canonical(unfused, drop=("training",)):
                print(f"FAIL: {model}: the unfused plan equals the fused one: the comparison cannot tell plans apart")
                failed += 1
    print(f"{2 * len(MODELS) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
