#!/usr/bin/env python3
"""estimate_step(parallel=...) on a fake process group: what DDP, ZeRO-1 and FSDP2 add to one rank's step, held
against the rules PyTorch's own code follows (DDP's bucket assignment, ZeroRedundancyOptimizer's partition,
FSDP2's padded dim-0 shards and mixed-precision policy), on a small decoder whose sizes do not divide evenly.
Exit 77 without torch."""
import sys

from torch_testlib import Results, args, need_torch

A = args()
need_torch()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import memplan_torch  # noqa: E402
from memplan_torch.caching_allocator import round_size  # noqa: E402

VOCAB, D, BLOCKS, BATCH, SEQ = 1003, 96, 3, 4, 64


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.up = nn.Linear(D, 4 * D + 5)
        self.down = nn.Linear(4 * D + 5, D)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, ids, labels):
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x)
        logits = self.head(x)
        return F.cross_entropy(logits.float().reshape(-1, VOCAB), labels.reshape(-1))


torch.manual_seed(0)
MODEL = Decoder()
IDS = torch.randint(0, VOCAB, (BATCH, SEQ))
LABELS = torch.randint(0, VOCAB, (BATCH, SEQ))
PARAM_BYTES = [p.numel() * 4 for p in MODEL.parameters()]


def estimate(parallel=None, bf16=False, optimizer=True, steps=None):
    return memplan_torch.estimate_step(
        MODEL, (IDS, LABELS), loss_fn=lambda loss: loss, optimizer=(lambda ps: torch.optim.AdamW(ps)) if optimizer else None,
        autocast_dtype=torch.bfloat16 if bf16 else None, parallel=parallel, steps=steps)


SINGLE = estimate()


def ddp_adds_its_buckets():
    ddp = estimate(memplan_torch.DataParallel("ddp", 2))
    single = estimate(steps=3)  # DDP's steady state is its third step (the second rebuilds the buckets)
    buckets = ddp["breakdown_at_peak"].get("gradient_buckets", 0)
    # each bucket is one flat tensor of its parameters' gradients: the buckets hold every gradient byte once
    assert sum(PARAM_BYTES) <= buckets <= sum(PARAM_BYTES) + 512 * len(PARAM_BYTES), (buckets, sum(PARAM_BYTES))
    assert ddp["before_step_bytes"] - single["before_step_bytes"] == buckets, (ddp["before_step_bytes"], single, buckets)
    assert ddp["peak_allocated_bytes"] - single["peak_allocated_bytes"] == buckets, (ddp["peak_allocated_bytes"], buckets)
    # the rebuild in the second step holds the old buckets beside the new ones: the whole run peaks higher
    assert ddp["run_peak_allocated_bytes"] - ddp["peak_allocated_bytes"] >= 0.99 * sum(PARAM_BYTES), ddp
    assert [r["rank"] for r in ddp["ranks"]] == [0] and ddp["parallel"]["layout"] == "ddp"
    # where the weights dominate (the optimizer step's peak holds every gradient), gradients as views of the
    # buckets hold each gradient byte once instead of twice
    mlp = nn.Sequential(*(nn.Linear(512, 512) for _ in range(4)))
    grads = sum(p.numel() * 4 for p in mlp.parameters())

    def step(view):
        return memplan_torch.estimate_step(
            mlp, (torch.randn(2, 512),), loss_fn=lambda y: y.square().mean(), optimizer=lambda ps: torch.optim.AdamW(ps),
            parallel=memplan_torch.DataParallel("ddp", 2, gradient_as_bucket_view=view))
    copies, views = step(False), step(True)
    assert copies["peak_phase"] == "optimizer", copies["peak_phase"]
    assert copies["peak_allocated_bytes"] - views["peak_allocated_bytes"] >= 0.9 * grads, (copies, views, grads)


def zero1_partitions_the_optimizer_state():
    z = estimate(memplan_torch.DataParallel("zero1", 3))
    ranks = z["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1, 2]
    before = [r["before_step_bytes"] for r in ranks]
    # AdamW keeps two fp32 tensors (and a step count) per parameter: summed over the ranks, the state of the
    # whole model once; the ranks own different parameters, so their memory differs
    ddp = estimate(memplan_torch.DataParallel("ddp", 3))
    state_full = ddp["before_step_bytes"] - SINGLE["before_step_bytes"]  # buckets only: same on every rank
    opt_full = SINGLE["breakdown_at_peak"].get("optimizer_state", 0)
    per_rank_state = [b - (ddp["before_step_bytes"] - opt_full) for b in before]
    assert abs(sum(per_rank_state) - opt_full) <= 3 * 512 * 3 * len(PARAM_BYTES), (per_rank_state, opt_full, state_full)
    assert len(set(before)) > 1, before
    assert z["peak_allocated_bytes"] == max(r["peak_allocated_bytes"] for r in ranks)


def fsdp2_holds_padded_shards():
    world = 2
    f = estimate(memplan_torch.DataParallel("fsdp2", world))
    shard = sum(round_size(-(-p.shape[0] // world) * (p.numel() // p.shape[0]) * 4) for p in MODEL.parameters())
    assert f["breakdown_at_peak"].get("parameters") == shard, (f["breakdown_at_peak"], shard)
    assert f["before_step_bytes"] < SINGLE["before_step_bytes"]
    f4 = estimate(memplan_torch.DataParallel("fsdp2", 4))
    assert f4["before_step_bytes"] < f["before_step_bytes"]
    # the policy computes in bf16 without autocast: less than fp32, and no autocast copies of the weights
    fb = estimate(memplan_torch.DataParallel("fsdp2", world), bf16=True)
    assert fb["peak_allocated_bytes"] < f["peak_allocated_bytes"]
    assert "autocast_weights" not in fb["breakdown_at_peak"]


def forward_backward_without_optimizer():
    f = estimate(memplan_torch.DataParallel("fsdp2", 2), optimizer=False)
    assert "optimizer_state" not in f["breakdown_at_peak"] and f["peak_allocated_bytes"] > f["before_step_bytes"]


def bad_layouts_are_refused():
    for kw, word in ((dict(layout="pipeline", world_size=2), "layout"), (dict(layout="ddp", world_size=0), "world_size"),
                     (dict(layout="ddp", world_size=2, rank=2), "rank")):
        try:
            memplan_torch.DataParallel(**kw)
        except ValueError as e:
            assert word in str(e), e
        else:
            raise AssertionError(f"{kw} accepted")
    try:
        estimate(parallel="ddp")
    except ValueError as e:
        assert "parallel" in str(e)
    else:
        raise AssertionError("a string layout accepted")


R = Results()
R.run("DDP adds one flat bucket per bucket of gradients, kept from construction", ddp_adds_its_buckets)
R.run("ZeRO-1's ranks own disjoint parts of the AdamW state that sum to the whole", zero1_partitions_the_optimizer_state)
R.run("FSDP2 holds dim-0 shards padded as fully_shard pads them; bf16 policy without autocast", fsdp2_holds_padded_shards)
R.run("FSDP2 forward and backward without an optimizer", forward_backward_without_optimizer)
R.run("bad layouts are refused naming the argument", bad_layouts_are_refused)
sys.exit(R.finish())
