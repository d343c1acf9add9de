#!/usr/bin/env python3
"""memplan_torch.estimate_step's parts against PyTorch's documented rules and the GPU's measured ones: the caching
allocator replay (rounding, pools, splitting, merging), CUDA autocast's policies on the fake step, the SDPA kernel
and cuDNN RNN reserve rules against the grid measured on the H200 (bench/results/zoo_h200_2026-11-27), CUDA's
one-byte dropout mask, the meta-device model, the data-dependent rerun, and the step's trace drawn by
`memplan viz --trace`. Exit 77 without torch."""
import json
import os
import sys
import tempfile

from torch_testlib import REPO, Results, args, need_torch

A = args()
need_torch()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import memplan_torch  # noqa: E402
from memplan_torch.caching_allocator import CachingAllocator  # noqa: E402
from memplan_torch.device_rules import gpu_rules, sdpa_backend  # noqa: E402

PROBE = os.path.join(REPO, "bench", "results", "zoo_h200_2026-11-27", "gpu_rules_probe.json")
MIB = 1 << 20


def caching_rules():
    a = CachingAllocator()
    b1 = a.alloc(100)                      # small pool: a 512-byte block of a new 2 MiB segment
    assert (a.allocated, a.reserved) == (512, 2 * MIB), (a.allocated, a.reserved)
    b2 = a.alloc(3 * MIB)                  # large pool, under 10 MiB: a new 20 MiB segment, split (17 MiB free)
    assert (a.allocated, a.reserved) == (512 + 3 * MIB, 22 * MIB)
    b3 = a.alloc(18 * MIB - 100)           # no free block fits: its own segment, rounded up to 2 MiB
    assert (a.allocated, a.reserved) == (512 + 21 * MIB, 40 * MIB), (a.allocated, a.reserved)
    b4 = a.alloc(16 * MIB + MIB // 2)      # the 17 MiB free block; the 0.5 MiB rest is not split: 17 MiB counted
    assert (a.allocated, a.reserved) == (512 + 38 * MIB, 40 * MIB), a.allocated
    a.free(b2)
    a.free(b4)                             # merges with b2's free block: one 20 MiB block again
    b5 = a.alloc(19 * MIB + 600 * 1024)    # takes it whole (the rest is under 1 MiB)
    assert (a.allocated, a.reserved) == (512 + 38 * MIB, 40 * MIB), a.allocated
    b6 = a.alloc(1000)                     # small pool again: the first segment's free rest
    assert a.reserved == 40 * MIB
    for b in (b1, b3, b5, b6):
        a.free(b)
    assert a.allocated == 0 and a.peak_allocated == 512 + 38 * MIB + 1024, a.peak_allocated
    assert a.peak_reserved == a.reserved == 40 * MIB  # segments are never given back


def autocast_policies():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from memplan_torch.autocast_rules import CudaAutocastOnCpu, cuda_autocast_lists

    lists = cuda_autocast_lists()
    assert ("layer_norm", "") in lists["fp32"] and ("mm", "") in lists["lower_precision_fp"]
    assert ("softmax", "int") in lists["fp32_set_opt_dtype"]
    with FakeTensorMode():
        x, w = torch.randn(4, 8), torch.randn(16, 8, requires_grad=True)
        with CudaAutocastOnCpu(torch.bfloat16), torch.autocast("cpu", dtype=torch.bfloat16):
            y = F.linear(x, w)
            assert y.dtype == torch.bfloat16
            assert F.layer_norm(y, (16,)).dtype == torch.float32          # CUDA's fp32 list (CPU's keeps bf16)
            assert torch.softmax(y, -1).dtype == torch.float32           # fp32_set_opt_dtype
            assert torch.log_softmax(y, -1, dtype=torch.bfloat16).dtype == torch.bfloat16  # an explicit dtype stays
            assert (y * 2).dtype == torch.bfloat16                        # not listed: runs in the input's dtype
            assert F.linear(x, w) is not None
        with torch.autocast("cpu", dtype=torch.bfloat16):  # the overrides are gone once left
            assert F.layer_norm(F.linear(x, w), (16,)).dtype == torch.bfloat16


def sdpa_rules_match_probe():
    if not os.path.isfile(PROBE):
        raise AssertionError(f"{PROBE} is missing")
    rows = json.load(open(PROBE))["sdpa"]["rows"]
    rules = gpu_rules("h200")
    wrong = []
    for r in rows:
        dtype = getattr(torch, r["dtype"])
        b, h, s, d = 2, 4, r["seq"], r["head_dim"]
        hk = 2 if r["gqa"] else 4

        def make(heads):
            if r["layout"] == "bshd":
                return torch.empty(b, s, heads, d, dtype=dtype, device="meta").transpose(1, 2)
            return torch.empty(b, heads, s, d, dtype=dtype, device="meta")

        m = None
        if r["mask"] == "bool":
            m = torch.empty(b, 1, s, s, dtype=torch.bool, device="meta")
        elif r["mask"] == "bool_b1":
            m = torch.empty(1, 1, s, s, dtype=torch.bool, device="meta")
        elif r["mask"] == "float":
            m = torch.empty(b, 1, s, s, dtype=dtype, device="meta")
        got = sdpa_backend(rules, make(h), make(hk), make(hk), m, r["dropout"], r["causal"], r["gqa"])
        if not r["pytorch"].startswith(got):
            wrong.append((r, got))
    # the measurement used cuDNN 9.19: the rule needs a PyTorch whose cuDNN is newer than 9.15 too
    assert not wrong, f"{len(wrong)} of {len(rows)} SDPA choices differ, e.g. {wrong[:2]}"


def rnn_reserve_matches_probe():
    rows = json.load(open(PROBE))["rnn_reserve"]
    from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: F401

    bad = []
    for r in rows[::7]:
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = getattr(nn, r["kind"])(r["input"], r["hidden"], num_layers=r["layers"], batch_first=True,
                                                  bidirectional=r["bidirectional"])

            def forward(self, x):
                return self.rnn(x)[0]

        x = torch.randn(r["batch"], r["seq"], r["input"])
        dt = None if r["dtype"] == "float32" else getattr(torch, r["dtype"])
        est = memplan_torch.estimate_step(M(), (x,), loss_fn=lambda o: o.float().sum(), autocast_dtype=dt,
                                          op_log=True)
        reserve = est["cudnn_rnn_reserve_bytes"]
        measured = r["reserve_bytes"][0]
        if not (measured - 1024 <= reserve <= measured):
            bad.append((r, reserve))
    assert not bad, f"{len(bad)} reserves differ from the H200's, e.g. {bad[:2]}"


def dropout_mask_is_one_byte():
    class D(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(1024, 1024, bias=False)  # no bias: its gradient's sum would be the peak

        def forward(self, x):
            return F.dropout(self.lin(x), 0.5, training=self.training).sum()

    x = torch.randn(4096, 1024)
    est = memplan_torch.estimate_step(D(), (x,), loss_fn=lambda o: o)
    saved = est["breakdown_at_peak"].get("saved_for_backward", 0)
    # saved: dropout's bool mask (4 MiB), not the CPU composite's float noise (16 MiB); the linear's input is an input
    assert 4 * MIB <= saved <= 4 * MIB + 4096, saved / MIB


def meta_model_equals_cpu_model():
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512))

    x = torch.randn(256, 512)
    kw = dict(loss_fn=lambda o: o.sum(), optimizer=lambda ps: torch.optim.AdamW(ps))
    cpu = memplan_torch.estimate_step(make(), (x,), **kw)
    with torch.device("meta"):
        meta_model = make()
    meta = memplan_torch.estimate_step(meta_model, (x,), **kw)
    for k in ("before_step_bytes", "peak_allocated_bytes", "peak_reserved_bytes"):
        assert cpu[k] == meta[k], (k, cpu[k], meta[k])


def data_dependent_step_reruns():
    class Routed(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(64, 64), nn.Linear(64, 64)

        def forward(self, x):
            pick = x[:, 0] > 0
            out = torch.zeros_like(x)
            out[pick] = self.a(x[pick])          # a data-dependent size (boolean indexing)
            out[~pick] = self.b(x[~pick])
            return out if x.sum().item() > -1e9 else out * 2

    torch.manual_seed(0)
    x = torch.randn(512, 64)
    est = memplan_torch.estimate_step(Routed(), (x,), loss_fn=lambda o: o.sum())
    assert any("data-dependent" in n for n in est["notes"]), est["notes"]
    assert est["peak_allocated_bytes"] > est["before_step_bytes"] > 0


def input_value_read_stays_fake():
    class Checked(nn.Module):
        def __init__(self, read):
            super().__init__()
            self.read = read
            self.emb, self.head = nn.Embedding(100, 64), nn.Linear(64, 100)

        def forward(self, ids):
            pos = torch.arange(ids.shape[1]).expand_as(ids)
            if self.read and not (torch.diff(pos, dim=-1) == 1).all():  # transformers' packed-sequence check
                raise AssertionError("the read was answered with another value than the real one")
            if self.read and ids.sum().item() < 0:
                raise AssertionError("a sum of token ids is never negative")
            return self.head(self.emb(ids) + self.emb(pos))

    ids = torch.randint(0, 100, (8, 128))
    kw = dict(loss_fn=lambda o, y: F.cross_entropy(o.flatten(0, 1), y.flatten()), targets=(ids,),
              optimizer=lambda ps: torch.optim.AdamW(ps))
    torch.manual_seed(0)
    read = memplan_torch.estimate_step(Checked(True), (ids,), **kw)
    torch.manual_seed(0)
    plain = memplan_torch.estimate_step(Checked(False), (ids,), **kw)
    assert any("data-dependent reads answered" in n for n in read["notes"]), read["notes"]
    assert not any("real CPU" in n for n in read["notes"]), read["notes"]
    for k in ("before_step_bytes", "peak_allocated_bytes", "peak_reserved_bytes"):
        assert read[k] == plain[k], (k, read[k], plain[k])


def trace_drawn_by_viz():
    import subprocess

    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10))
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "step.trace.json")
        est = memplan_torch.estimate_step(model, (x,), loss_fn=F.cross_entropy, targets=(y,),
                                          optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
                                          trace_path=path)
        doc = json.load(open(path))
        assert doc["planned"] is False and doc["caching_allocator_max_allocated_bytes"] == est["peak_allocated_bytes"]
        svg = os.path.join(d, "step.svg")
        r = subprocess.run([A.memplan, "viz", "--trace", path, "-o", svg], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert open(svg).read().lstrip().startswith("<"), "no SVG written"


def bad_arguments_are_refused():
    model = nn.Linear(4, 4)
    for kw, what in ((dict(device="cpu"), "device"), (dict(steps=1), "steps"), (dict(gpu="tpu9"), "gpu")):
        try:
            memplan_torch.estimate_step(model, (torch.randn(2, 4),), loss_fn=lambda o: o.sum(), **kw)
        except ValueError as e:
            assert what in str(e), e
        else:
            raise AssertionError(f"{kw} was accepted")


def reduction_staging_matches_gpu():
    from memplan_torch.cuda_kernels import reduction_staging_bytes

    rules = gpu_rules("h200")
    # measured on the H200 (bench/zoo_optrace.py, BERT's 8000-word decoder bias gradient): 62.5 MiB within the sum
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.empty(1024, 8000, dtype=dtype, device="meta")
        got = reduction_staging_bytes("sum", x, [0], rules.multiprocessors, rules.max_threads_per_multiprocessor)
        assert got[0] == 65536000, got
    # a reduction along the contiguous dim, or few inputs per output, takes no staging buffer
    x = torch.empty(1024, 8000, device="meta")
    assert reduction_staging_bytes("sum", x, [1], 132, 2048) == (0, 0)
    assert reduction_staging_bytes("sum", torch.empty(8, 8000, device="meta"), [0], 132, 2048) == (0, 0)


R = Results()
R.run("caching allocator: 512-byte rounding, 2/20 MiB segments, unsplit rests, merging", caching_rules)
R.run("CUDA autocast policies on the fake CPU step (from PyTorch's header)", autocast_policies)
R.run("SDPA kernel rule equals PyTorch's choice on every case of the H200 grid", sdpa_rules_match_probe)
R.run("cuDNN RNN reserve equals the H200's", rnn_reserve_matches_probe)
R.run("dropout saves CUDA's one-byte mask", dropout_mask_is_one_byte)
R.run("a CUDA reduction's staging buffer equals the H200's", reduction_staging_matches_gpu)
R.run("a model on the meta device estimates as on the CPU", meta_model_equals_cpu_model)
R.run("a data-dependent step is rerun at the example's values, with a note", data_dependent_step_reruns)
R.run("a read of the inputs' values is answered on the fake step, which stays fake", input_value_read_stays_fake)
R.run("the estimated step's trace is drawn by memplan viz --trace", trace_drawn_by_viz)
R.run("bad arguments are refused naming the argument", bad_arguments_are_refused)
sys.exit(R.finish())
