#!/usr/bin/env python3
"""memplan's planned allocator under DDP and FSDP2 (issue 33, part 3): the same data-parallel training run with
PyTorch's caching allocator and with memplan_torch.use_planned_allocator, one process per GPU, losses compared step
by step and each rank's device memory held against PyTorch's max_memory_allocated of the same run.

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 2 bench/multi_gpu_allocator.py --allocator torch --out A.json
    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 2 bench/multi_gpu_allocator.py --allocator memplan --out B.json
    python3 bench/multi_gpu_allocator.py --compare A.json B.json --out compare.json

The planned allocator's figures are per process (its peak over everything the process ran), so to measure one layout
give each launch one layout and one precision (--layouts ddp --precisions fp32); --compare takes pairs of files
(torch, memplan) in order.

A GPT-2-style decoder (transformers, 6 layers, d768, vocab 50257, dropout off), batch 4 per GPU, sequence 512, AdamW,
cross-entropy, fp32 (TF32 off) and bf16 (autocast under DDP, MixedPrecisionPolicy under FSDP2), 12 steps; DDP (its
buckets, its NCCL stream) and FSDP2 (fully_shard per block: all-gather and reduce-scatter streams). The allocator is
chosen per process before CUDA starts, so each allocator is its own launch; every layout runs in it in turn.
"""
import argparse
import json
from contextlib import nullcontext
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))


def build(device):
    import torch
    import transformers

    config = transformers.GPT2Config(vocab_size=50257, n_positions=512, n_embd=768, n_layer=6, n_head=12,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel._from_config(config, attn_implementation="sdpa").to(device).train()


def run_layout(layout, precision, args, rank, device):
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    import memplan_torch

    model = build(device)
    bf16 = precision == "bf16"
    if layout == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
        for block in model.transformer.h:
            fully_shard(block, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    else:
        model = DDP(model, device_ids=[device])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1000 + rank)
    batches = [(torch.randint(0, 50257, (args.batch, args.seq), generator=g),
                torch.randint(0, 50257, (args.batch, args.seq), generator=g)) for _ in range(args.steps)]
    losses, per_step = [], []
    torch.cuda.synchronize()
    if args.allocator == "torch":  # a pluggable allocator has no peak statistics to reset (memplan keeps its own)
        torch.cuda.reset_peak_memory_stats()
    for ids, labels in batches:
        with (memplan_torch.step() if args.allocator == "memplan" else nullcontext()):
            ids, labels = ids.to(device), labels.to(device)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16 and layout != "fsdp2"):
                logits = model(input_ids=ids, use_cache=False).logits
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss.item()))
            del logits, loss
        if args.allocator == "memplan":  # where the planned allocator's peak falls: its device bytes after each step
            st = memplan_torch.stats(device)
            per_step.append({k: st.get(k) for k in ("device_bytes", "peak_device_bytes", "arena_bytes", "pool_bytes", "peak_pool_bytes", "periodic_bytes", "misses", "other_stream", "carried")})
    torch.cuda.synchronize()
    row = dict(layout=layout, precision=precision, rank=rank, losses=losses)
    if args.allocator == "memplan":
        s = memplan_torch.stats(device)
        row["per_step"] = per_step
        row.update(memplan={k: s.get(k) for k in ("arena_bytes", "pool_bytes", "device_bytes", "peak_device_bytes", "hits",
                                                 "misses", "resyncs", "replans", "steps", "other_stream")})
    else:
        row["max_memory_allocated"] = torch.cuda.max_memory_allocated(device)
        row["max_memory_reserved"] = torch.cuda.max_memory_reserved(device)
    del model, opt
    return row


def launch(args):
    import torch
    import torch.distributed as dist

    import memplan_torch

    if args.allocator == "memplan":
        memplan_torch.use_planned_allocator(record_steps=2)
    rank, local = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rows = []
    for layout in args.layouts.split(","):
        for precision in args.precisions.split(","):
            try:
                row = run_layout(layout, precision, args, rank, local)
            except Exception as e:  # noqa: BLE001 - recorded per configuration, the others still run
                row = dict(layout=layout, precision=precision, rank=rank, error=f"{type(e).__name__}: {str(e)[:500]}")
            gathered = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, row)
            if rank == 0:
                rows.append(dict(layout=layout, precision=precision, per_rank=gathered))
                print(args.allocator, layout, precision, [r.get("error") or (r["losses"][-1], r.get("max_memory_allocated", 0) >> 20,
                                                           (r.get("memplan") or {}).get("peak_device_bytes", 0) >> 20)
                                                          for r in gathered], flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        out = dict(allocator=args.allocator, device=torch.cuda.get_device_name(0), gpus=len(rows[0]["per_rank"]),
                   torch_version=torch.__version__, batch=args.batch, seq=args.seq, steps=args.steps, rows=rows)
        with open(args.out, "w") as f:
            json.dump(out, f, indent=2)


def compare(args):
    if len(args.compare) % 2:
        raise SystemExit("--compare takes pairs of files: torch, memplan")
    out = dict(configs=[])
    for i in range(0, len(args.compare), 2):
        compare_pair(args.compare[i], args.compare[i + 1], out)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)


def compare_pair(path_a, path_b, out):
    a, b = json.load(open(path_a)), json.load(open(path_b))
    torch_run, planned = (a, b) if a["allocator"] == "torch" else (b, a)
    out.update(device=torch_run["device"], gpus=torch_run["gpus"])
    for rt, rp in zip(torch_run["rows"], planned["rows"]):
        for t, p in zip(rt["per_rank"], rp["per_rank"]):
            c = dict(layout=rt["layout"], precision=rt["precision"], rank=t["rank"])
            if "error" in t or "error" in p:
                c["error"] = t.get("error") or p.get("error")
            else:
                c["max_loss_diff"] = max(abs(x - y) for x, y in zip(t["losses"], p["losses"]))
                c["losses_identical"] = t["losses"] == p["losses"]
                c["torch_max_allocated"], c["torch_max_reserved"] = t["max_memory_allocated"], t["max_memory_reserved"]
                c["memplan_peak_device_bytes"] = p["memplan"]["peak_device_bytes"]
                c["memplan_over_torch_allocated"] = c["memplan_peak_device_bytes"] / c["torch_max_allocated"]
                c["memplan"] = p["memplan"]
            out["configs"].append(c)
            print(json.dumps({k: v for k, v in c.items() if k != "memplan"}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--allocator", choices=("torch", "memplan"), default="torch")
    ap.add_argument("--layouts", default="ddp,fsdp2")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--compare", nargs="+", metavar="JSON")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.compare:
        compare(args)
    else:
        launch(args)


if __name__ == "__main__":
    sys.exit(main())
