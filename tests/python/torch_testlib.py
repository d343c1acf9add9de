"""Shared by the memplan_torch tests: command-line arguments, the package on sys.path, running memplan."""
import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))


def args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", required=True)
    ap.add_argument("--samples", default=os.path.join(REPO, "samples"))
    ap.add_argument("--lib", default=None, help="libmemplan_torch.so (default: beside --memplan)")
    return ap.parse_args()


def skip(reason):
    print(f"skip: {reason}")
    sys.exit(77)


def need_torch():
    try:
        import torch  # noqa: F401
    except Exception as e:  # absent, or a broken install
        skip(f"torch is not importable ({type(e).__name__}: {e})")


def memplan(binary, *cmd, json_out=False):
    r = subprocess.run([binary, *cmd], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"memplan {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout) if json_out else r.stdout


class Results:
    def __init__(self):
        self.passed, self.failed = 0, 0

    def run(self, name, fn, *a):
        try:
            fn(*a)
            self.passed += 1
            print(f"ok   {name}")
        except Exception as e:  # report every test, then fail
            self.failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0
