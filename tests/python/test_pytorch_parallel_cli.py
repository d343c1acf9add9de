#!/usr/bin/env python3
"""`memplan plan --gpus N --zero K`'s prediction of PyTorch on each rank (DDP, DDP + ZeroRedundancyOptimizer, FSDP2),
held against the single-GPU `pytorch_peak_bytes` of the same step and against the rules PyTorch's own code follows:
DDP's buckets hold every gradient byte once (twice at the run's peak, when they are rebuilt), ZeRO-1's ranks hold
disjoint parts of the optimizer state (by ZeroRedundancyOptimizer's largest-first partition, checked against
PyTorch's when torch is installed), FSDP2 holds padded dim-0 shards. On samples/models/tiny_mlp.onnx (every weight an
initializer) and tiny_gpt.onnx (blocks); exit 77 when the command or the samples are missing."""
import json
import os
import subprocess
import sys

from viz_testlib import check, cli_args, failures

A = cli_args()
if A is None:
    sys.exit(77)
MODEL = os.path.join(A.samples, "models", "tiny_mlp.onnx")
GPT = os.path.join(A.samples, "models", "tiny_gpt.onnx")
STEP = ["--train", "--optimizer", "adamw", "--loss", "ce", "--packer", "greedy_by_size",
        "--exact-pack-seconds", "0"]


def plan(*extra, model=MODEL):
    r = subprocess.run([A.memplan, "plan", model, *STEP, *extra, "--json"], capture_output=True, text=True)
    if not check(r.returncode == 0, f"plan {' '.join(extra)}: exit {r.returncode}: {r.stderr.strip()[-400:]}"):
        return None
    return json.loads(r.stdout)


def weights():
    """The trained weights' shapes, from the model's initializers (every float initializer of the sample is one)."""
    import onnx

    m = onnx.load(MODEL, load_external_data=False)
    return [tuple(t.dims) for t in m.graph.initializer if t.data_type == onnx.TensorProto.FLOAT]


def ranks_of(p):
    return sorted(r for role in p["roles"] for r in role["ranks"])


single = plan()
ddp = plan("--gpus", "2", "--zero", "0")
if single and ddp:
    p = ddp["pytorch"]
    check(p["layout"] == "DDP" and ranks_of(p) == [0, 1] and len(p["roles"]) == 1, f"DDP roles: {p['roles']}")
    role, buckets = p["roles"][0], p["bucket_bytes"]
    check(role["pytorch_step_peak_bytes"] == single["pytorch_peak_bytes"] + buckets,
          f"DDP step peak {role['pytorch_step_peak_bytes']} != single {single['pytorch_peak_bytes']} + buckets {buckets}")
    check(role["pytorch_peak_bytes"] == role["pytorch_step_peak_bytes"] + buckets, "the run's peak holds the rebuilt buckets")
    check(ddp["pytorch_peak_bytes"] == role["pytorch_peak_bytes"], "top-level pytorch_peak_bytes is the highest rank's")
    try:
        import math

        grads = [4 * math.prod(s) for s in weights()]
        # every gradient once, each bucket rounded to the allocator's 512 bytes
        check(sum(grads) <= buckets <= sum(grads) + 512 * len(grads), f"buckets {buckets} for gradients of {sum(grads)} bytes")
    except ImportError:
        pass

zero1 = plan("--gpus", "3", "--zero", "1")
if ddp and zero1:
    p = zero1["pytorch"]
    check(ranks_of(p) == [0, 1, 2], f"ZeRO-1 ranks: {p['roles']}")
    full_state = ddp["pytorch"]["roles"][0]["model_state_bytes"]  # weights + the whole optimizer state + buckets
    per_rank = {r: role["model_state_bytes"] for role in p["roles"] for r in role["ranks"]}
    try:
        import math

        w = sum(-(-4 * math.prod(s) // 512) * 512 for s in weights())
        state = full_state - w - ddp["pytorch"]["bucket_bytes"]
        owned = [v - w - p["bucket_bytes"] for v in per_rank.values()]
        # every rank holds the weights and the buckets; the optimizer state is split, once over the ranks
        check(abs(sum(owned) - state) <= 3 and min(owned) > 0, f"ZeRO-1 state per rank {owned}, whole {state}")
    except ImportError:
        pass
    check(all(v < full_state for v in per_rank.values()), f"every ZeRO-1 rank holds less than DDP's {full_state}: {per_rank}")
    check(max(role["pytorch_step_peak_bytes"] for role in p["roles"]) < ddp["pytorch"]["roles"][0]["pytorch_step_peak_bytes"],
          "ZeRO-1 peaks below DDP")
    try:
        import torch
        import torch.distributed as dist  # noqa: F401
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.distributed.optim import ZeroRedundancyOptimizer
        from torch.testing._internal.distributed.fake_pg import FakeStore

        shapes = weights()
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=3)
        with FakeTensorMode():
            ps = [torch.empty(s, requires_grad=True) for s in shapes]
            z = ZeroRedundancyOptimizer(ps, optimizer_class=torch.optim.AdamW)
            owned = [sum(p.numel() for p in z._partition_parameters()[r][0]["params"]) for r in range(3)]
        dist.destroy_process_group()
        # the ranks' optimizer states are in the proportion of the elements PyTorch's partition gives them
        states = [per_rank[r] for r in range(3)]
        order_torch = sorted(range(3), key=lambda r: owned[r])
        order_memplan = sorted(range(3), key=lambda r: states[r])
        check([owned[r] for r in order_torch] == [owned[r] for r in order_memplan],
              f"ZeRO-1 partition: PyTorch's elements per rank {owned}, memplan's model state per rank {states}")
    except ImportError:
        pass

fsdp = plan("--gpus", "2", "--zero", "3")
fsdp4 = plan("--gpus", "4", "--zero", "3")
if ddp and fsdp and fsdp4:
    p = fsdp["pytorch"]
    check(p["layout"] == "FSDP2" and ranks_of(p) == [0, 1], f"FSDP2 roles {p['roles']}")
    try:
        import math

        shards = sum(-(-(-(-s[0] // 2) * math.prod(s[1:]) * 4) // 512) * 512 for s in weights())
        # model state: the padded weight shards and the same share of AdamW's state (two tensors per weight)
        check(abs(p["roles"][0]["model_state_bytes"] - 3 * shards) <= 3 * 512 * len(weights()),
              f"FSDP2 model state {p['roles'][0]['model_state_bytes']} for shards of {shards} bytes")
    except ImportError:
        pass
    check(p["roles"][0]["pytorch_peak_bytes"] < ddp["pytorch"]["roles"][0]["pytorch_step_peak_bytes"], "FSDP2 below DDP")
    check(fsdp4["pytorch"]["roles"][0]["model_state_bytes"] < p["roles"][0]["model_state_bytes"], "4 ranks shard finer")

gpt_ddp, gpt_fsdp = plan("--gpus", "2", "--zero", "0", model=GPT), plan("--gpus", "2", "--zero", "3", model=GPT)
if gpt_ddp and gpt_fsdp:
    # blocks found by their names: gathered one (and the prefetched one) at a time, below DDP's whole model state
    check(not any("no repeated blocks" in d for d in gpt_fsdp["pytorch"]["doubts"]), f"blocks: {gpt_fsdp['pytorch']['doubts']}")
    check(gpt_fsdp["pytorch_peak_bytes"] < gpt_ddp["pytorch_peak_bytes"], "FSDP2 below DDP on the blocks model")
tp = plan("--gpus", "2", "--tp", "2", model=GPT)
if tp:
    check("pytorch" not in tp, "tensor parallelism: no PyTorch data-parallel prediction")
r = subprocess.run([A.memplan, "plan", GPT, *STEP, "--gpus", "2", "--zero", "3"], capture_output=True, text=True)
check(r.returncode == 0 and "PyTorch FSDP2 on 2 GPUs" in r.stdout, f"text output: {r.stdout[-600:]}")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
