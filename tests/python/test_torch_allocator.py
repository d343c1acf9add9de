#!/usr/bin/env python3
"""memplan_torch's planned allocator inside PyTorch training loops (needs a CUDA device and libmemplan_torch.so;
exit 77 without them). Each case runs in its own process: the allocator must be set before CUDA starts.
- losses of a planned run equal the default allocator's bit for bit, and later steps hit the plan;
- a short last batch (shape change) is served, counted as misses, and its loss still matches;
- with two recorded steps the gradients (made by the backward, freed by the next step's zero_grad) are served
  from the arena as periodic blocks, nothing of the replayed steps from the pool, losses identical;
- use_planned_allocator after a CUDA allocation raises a clear error;
- save_trace writes a trace that `memplan viz --trace` draws."""
import json
import os
import subprocess
import sys
import tempfile

from torch_testlib import REPO, Results, args, need_torch, skip

A = args()
need_torch()
import torch  # noqa: E402

if not torch.cuda.is_available():
    skip("no CUDA device (torch.cuda.is_available() is False)")
LIB = A.lib or os.environ.get("MEMPLAN_TORCH_LIB") or os.path.join(os.path.dirname(os.path.abspath(A.memplan)), "libmemplan_torch.so")
if not os.path.isfile(LIB):
    skip(f"{LIB} was not built (memplan built without the CUDA toolkit?)")

CHILD = r"""
import json, sys
sys.path.insert(0, {pkg!r})
import torch, torch.nn as nn, torch.nn.functional as F
import memplan_torch
mode, steps, short = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "short"
if mode == "memplan":
    memplan_torch.use_planned_allocator(record_steps={record_steps}, lib={lib!r})
torch.manual_seed(0)
torch.backends.cudnn.deterministic = True
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.Flatten(),
                      nn.Linear(16 * 8 * 8, 64), nn.GELU(), nn.Dropout(0.1), nn.Linear(64, 10)).cuda()
opt = torch.optim.Adam(model.parameters(), 1e-3)
g = torch.Generator().manual_seed(1)
data = [(torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 10, (8,), generator=g)) for _ in range(steps)]
if short:
    data[-1] = (data[-1][0][:3], data[-1][1][:3])
losses = []
for x, y in data:
    if mode == "memplan":
        memplan_torch.step_begin()
    loss = F.cross_entropy(model(x.cuda()), y.cuda())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.item())
    if mode == "memplan":
        memplan_torch.step_end()
out = {{"losses": [float.hex(v) for v in losses], "max_allocated": torch.cuda.max_memory_allocated()}}
if mode == "memplan":
    out["stats"] = memplan_torch.stats()
    if len(sys.argv) > 4:
        memplan_torch.save_trace(sys.argv[4])
print(json.dumps(out))
"""


def child(mode, steps, short=False, trace=None, record_steps=1):
    code = CHILD.format(pkg=os.path.join(REPO, "python"), lib=LIB, record_steps=record_steps)
    cmd = [sys.executable, "-c", code, mode, str(steps), "short" if short else "full"] + ([trace] if trace else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"{mode} run exited {r.returncode}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def stat(s, *keys):
    for k in keys:
        if k in s:
            return s[k]
    raise AssertionError(f"stats() has none of {keys}: {sorted(s)}")


def check_identical_losses():
    ref, got = child("default", 6), child("memplan", 6)
    assert got["losses"] == ref["losses"], f"losses differ: {ref['losses']} vs {got['losses']}"
    s = got["stats"]
    assert stat(s, "hits", "plan_hits") > 0, f"no allocation served from the plan: {s}"
    assert stat(s, "arena_bytes") > 0, s


def check_short_batch():
    ref, got = child("default", 5, short=True), child("memplan", 5, short=True)
    assert got["losses"] == ref["losses"], f"losses differ: {ref['losses']} vs {got['losses']}"
    assert stat(got["stats"], "misses", "plan_misses") > 0, f"the short batch was not counted: {got['stats']}"


def check_periodic_gradients():
    ref, got = child("default", 8), child("memplan", 8, record_steps=2)
    assert got["losses"] == ref["losses"], f"losses differ: {ref['losses']} vs {got['losses']}"
    s = got["stats"]
    assert stat(s, "periodic_blocks") > 0 and stat(s, "carried_in_arena") > 0, f"no gradient served from the arena: {s}"
    assert stat(s, "carried") == 0 and stat(s, "misses") == 0, s
    print(f"  periodic: memplan peak_device_bytes {s['peak_device_bytes']} (arena {s['arena_bytes']}, periodic region "
          f"{s['periodic_bytes']}, persistent {s['persistent_bytes']}), PyTorch max_allocated {ref['max_allocated']}")


def check_late_install_refused():
    code = (f"import sys; sys.path.insert(0, {os.path.join(REPO, 'python')!r}); import torch, memplan_torch\n"
            "x = torch.ones(4, device='cuda')\n"
            "try:\n    memplan_torch.use_planned_allocator(lib=%r)\n" % LIB +
            "except memplan_torch.MemplanTorchError as e:\n    print('refused:', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "refused:" in r.stdout and "before any CUDA allocation" in r.stdout, r.stdout + r.stderr


def check_trace_draws():
    with tempfile.TemporaryDirectory() as tmp:
        trace, svg = os.path.join(tmp, "step.trace.json"), os.path.join(tmp, "step.svg")
        child("memplan", 3, trace=trace)
        assert os.path.getsize(trace) > 0, "empty trace"
        r = subprocess.run([A.memplan, "viz", "--trace", trace, "-o", svg], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"memplan viz --trace exited {r.returncode}: {r.stderr}"


def main():
    r = Results()
    r.run("planned allocator: losses identical to PyTorch's allocator, later steps served by the plan", check_identical_losses)
    r.run("planned allocator: a short last batch is served, counted as misses, loss unchanged", check_short_batch)
    r.run("planned allocator: gradients carried across steps are periodic arena blocks (record_steps=2)", check_periodic_gradients)
    r.run("use_planned_allocator after a CUDA allocation raises a clear error", check_late_install_refused)
    r.run("save_trace writes a trace `memplan viz --trace` draws", check_trace_draws)
    return r.finish()


if __name__ == "__main__":
    sys.exit(main())
