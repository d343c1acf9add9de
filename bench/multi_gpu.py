#!/usr/bin/env python3
"""Data-parallel training on the GPUs of one host: PyTorch (DDP, FSDP2, ZeRO-1) beside memplan's NCCL runtime and,
where `memplan plan --gpus` exists, memplan's per-rank prediction. Issue 20 (docs/multi-gpu-run.md).

Launch (one process per GPU; 2 GPUs, or 1 for a degraded smoke test):
    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 2 bench/multi_gpu.py [--memplan scripts/memplan_carried.sh]
        [--out bench/results/multi_gpu.json] [--quick] [--steps 10] [--skip-torch] [--skip-memplan]

PyTorch part (every rank): a GPT-2-size decoder (124M: 12 layers, d768, 12 heads, vocab 50257) and a Llama-style
decoder (about 0.5B: 16 layers, d1536, 12 query / 4 KV heads, SwiGLU 4096, RMSNorm, RoPE, vocab 32000), dropout off,
batch 4 per GPU, sequence 1024, cross-entropy on random labels (fp32 logits), AdamW (foreach, PyTorch's default);
fp32 (TF32 off) and bf16, each layout as its docs recommend: DDP (bf16 = torch.autocast), DDP with
ZeroRedundancyOptimizer (ZeRO-1: AdamW state sharded; bf16 = autocast) and FSDP2 (fully_shard per decoder layer, then
the root; bf16 = MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) without autocast). Per rank:
torch.cuda.max_memory_allocated / max_memory_reserved over the warm-up and timed steps (reset after the model is
built) and over the last step alone (the steady state), memory_allocated before the last step, and the median step
time (CUDA events, after warm-up).

memplan part (rank 0, after the PyTorch part released the GPUs): the GPT-2 model exported to a training ONNX graph
(TorchScript exporter, weights stripped: memplan synthesizes them from their names), then `memplan train` with
--gpus N, one process per GPU (batch 4 each), and the same model on one GPU on the combined batch (4 N): step
time, device memory beside the plan, and the first step's gradients compared (max |diff| / max |g| per gradient).
If `memplan plan --help` lists --gpus, the per-rank plans of each PyTorch configuration are recorded too.

Writes one JSON (default bench/results/multi_gpu.json) with the device named.
"""
import argparse
import datetime
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off on the shared GPU hosts
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

GPT2 = dict(cls="GPT2LMHeadModel", config="GPT2Config", vocab=50257,
            kwargs=dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
LLAMA = dict(cls="LlamaForCausalLM", config="LlamaConfig", vocab=32000,
             kwargs=dict(vocab_size=32000, hidden_size=1536, intermediate_size=4096, num_hidden_layers=16,
                         num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=2048,
                         attention_dropout=0.0, tie_word_embeddings=False))
QUICK = {"gpt2": dict(n_layer=4), "llama": dict(num_hidden_layers=4)}


def build(name, quick, device):
    import torch
    import transformers

    spec = dict(GPT2 if name == "gpt2" else LLAMA)
    kwargs = dict(spec["kwargs"], **(QUICK[name] if quick else {}))
    config = getattr(transformers, spec["config"])(**kwargs)
    torch.manual_seed(0)
    model = getattr(transformers, spec["cls"])._from_config(config, attn_implementation="sdpa")
    return model.to(device).train(), spec["vocab"]


def batch(vocab, b, s, rank, device):
    import torch

    g = torch.Generator(device="cpu").manual_seed(1000 + rank)
    ids = torch.randint(0, vocab, (b, s), generator=g)
    labels = torch.randint(0, vocab, (b, s), generator=g)
    return ids.to(device), labels.to(device)


def torch_config(model_name, precision, wrap, args, rank, device):
    """One PyTorch configuration on this rank: peak memory and median step time."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    gc.collect()
    torch.cuda.empty_cache()
    model, vocab = build(model_name, args.quick, device)
    bf16 = precision == "bf16"
    if wrap == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
        layers = model.transformer.h if model_name == "gpt2" else model.model.layers
        for layer in layers:
            fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    elif wrap == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        model = DDP(model, device_ids=[device])
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-4)
    else:
        model = DDP(model, device_ids=[device])
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids, labels = batch(vocab, args.batch, args.seq, rank, device)
    autocast = bf16 and wrap != "fsdp2"  # FSDP2 computes in bf16 through its policy

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=ids, use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), labels.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps - 1):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = step()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    run_peak, run_reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss = step()
    torch.cuda.synchronize()
    row = dict(rank=rank, peak_allocated_bytes=max(run_peak, torch.cuda.max_memory_allocated()),
               peak_reserved_bytes=max(run_reserved, torch.cuda.max_memory_reserved()),
               step_before_bytes=before, step_peak_allocated_bytes=torch.cuda.max_memory_allocated(),
               step_peak_reserved_bytes=torch.cuda.max_memory_reserved(), step_seconds=statistics.median(times),
               last_loss=float(loss.item()), parameters=sum(p.numel() for p in model.parameters()))  # DTensor numel is the global one
    del model, opt
    return row


def run_torch(args, results):
    import torch
    import torch.distributed as dist

    for k, v in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29517")):
        os.environ.setdefault(k, v)  # started without torchrun: a world of one
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
    torch.backends.cudnn.allow_tf32 = False
    if not dist.is_initialized():
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    configs = []
    for model_name in args.models:
        for precision in ("bf16", "fp32"):
            for wrap in ("ddp", "zero1", "fsdp2"):
                configs.append((model_name, precision, wrap))
    rows = []
    for model_name, precision, wrap in configs:
        t0 = time.time()
        try:
            row = torch_config(model_name, precision, wrap, args, rank, local)
        except torch.cuda.OutOfMemoryError as e:
            row = dict(rank=rank, error=f"out of memory: {str(e).splitlines()[0]}")
        gathered = [None] * world
        dist.all_gather_object(gathered, row)
        if rank == 0:
            rows.append(dict(model=model_name, precision=precision, wrap=wrap, world_size=world, batch_per_gpu=args.batch,
                             seq=args.seq, optimizer="adamw", per_rank=gathered, seconds=time.time() - t0))
            print(f"torch {model_name:5s} {precision} {wrap:5s}: " + ", ".join(
                f"rank {r['rank']} peak {r.get('peak_allocated_bytes', 0) / 2**30:.2f} GiB "
                f"step {r.get('step_seconds', 0) * 1e3:.1f} ms" for r in gathered), flush=True)
        gc.collect()
        torch.cuda.empty_cache()
    dist.barrier()
    dist.destroy_process_group()
    results["torch"] = rows
    results["device"] = torch.cuda.get_device_name(local)
    results["gpus"] = world
    return rank, world


def export_onnx(name, quick, path):
    """The model's training graph for memplan: TorchScript exporter, opset 17, weights stripped (external data
    that is not written: memplan synthesizes values from the names)."""
    import io

    import onnx
    import torch

    sys.path.insert(0, HERE)
    from transformer_zoo import TextLogits  # logits only: no KV cache, an all-ones mask (as the sample exports)

    model, vocab = build(name, quick, "cpu")
    model = TextLogits(model)
    x = torch.randint(0, vocab, (2, 32))
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), buf, input_names=["input_ids"], output_names=["logits"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}},
                          opset_version=17, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          dynamo=False)
    proto = onnx.load_from_string(buf.getvalue())
    data = os.path.basename(path) + ".data"
    onnx.save_model(proto, path, save_as_external_data=True, all_tensors_to_one_file=True, location=data,
                    size_threshold=1024)
    if os.path.exists(os.path.join(os.path.dirname(path), data)):
        os.remove(os.path.join(os.path.dirname(path), data))


def memplan_cmd(args):
    if args.memplan:
        return [args.memplan]
    if os.path.exists(os.path.join(ROOT, ".carry/bin/memplan")):
        return [os.path.join(ROOT, "scripts/memplan_carried.sh")]
    return [os.path.join(ROOT, "build/memplan")]


def nccl_env():
    """LD_LIBRARY_PATH with the directory of PyTorch's libnccl.so.2 (memplan opens it at run time)."""
    env = dict(os.environ)
    try:
        import nvidia.nccl

        lib = os.path.join(list(nvidia.nccl.__path__)[0], "lib")
        env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    except ImportError:
        pass
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        env.pop(k, None)  # memplan reads RANK/WORLD_SIZE as its own when given no --rank/--gpus
    env["NCCL_NVLS_ENABLE"] = "0"
    return env


def memplan_train(cmd, model, world, args, tmp, precision, tag, combined=False, save=None):
    """`memplan train` on `world` GPUs (one process each) or, `combined`, one process on the combined batch."""
    base = cmd + ["train", model, "--no-dropout", "--loss", "ce", "--optimizer", "adamw", "--precision", precision,
                  "--dim", f"seq={args.seq}", "--steps", str(args.memplan_steps), "--json", "--backend", args.memplan_backend]
    env = nccl_env()
    t0 = time.time()
    if combined:
        procs = [subprocess.Popen(base + ["--dim", f"batch={args.batch * world}", "--device", "0"] +
                                  (["--save-grads", save] if save else []),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)]
    else:
        idfile = os.path.join(tmp, f"{tag}.ncclid")
        procs = [subprocess.Popen(base + ["--dim", f"batch={args.batch}", "--gpus", str(world), "--rank", str(r),
                                          "--device", str(r), "--nccl-id-file", idfile] + (["--save-grads", save] if save and r == 0 else []),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for r in range(world)]
    out = []
    for p in procs:
        o, e = p.communicate(timeout=args.memplan_timeout)
        out.append(json.loads(o) if p.returncode == 0 else dict(error=e.strip()[-2000:], returncode=p.returncode))
    return dict(ranks=out, wall_seconds=time.time() - t0)


def compare_grads(a_dir, b_dir):
    import numpy as np

    worst, k = 0.0, 0
    while os.path.exists(os.path.join(a_dir, f"grad_{k}.npy")):
        a = np.load(os.path.join(a_dir, f"grad_{k}.npy")).astype(np.float64)
        b = np.load(os.path.join(b_dir, f"grad_{k}.npy")).astype(np.float64)
        scale = float(np.max(np.abs(a))) or 1.0
        worst = max(worst, float(np.max(np.abs(a - b))) / scale)
        k += 1
    return dict(gradients_compared=k, max_rel_diff=worst, within_1e_5=worst <= 1e-5 if k else None)


def run_memplan(args, results, world):
    cmd = memplan_cmd(args)
    out = dict(command=" ".join(cmd))
    tmp = tempfile.mkdtemp(prefix="memplan_multi_gpu_")
    try:
        t0 = time.time()
        onnx_path = os.path.join(tmp, "gpt2.train.onnx")
        export_onnx("gpt2", args.quick, onnx_path)
        models = {"gpt2": onnx_path}
        out["export_seconds"] = time.time() - t0
        plan_help = subprocess.run(cmd + ["plan", "--help"], capture_output=True, text=True, env=nccl_env()).stdout
        if "--gpus" in plan_help:
            if "llama" in args.models:
                models["llama"] = os.path.join(tmp, "llama.train.onnx")
                export_onnx("llama", args.quick, models["llama"])
            preds = []
            zero = {"ddp": "0", "fsdp2": "3", "zero1": "1"}
            for row in results.get("torch", []):
                a = cmd + ["plan", models[row["model"]], "--train", "--gpus", str(world), "--zero", zero[row["wrap"]],
                           "--optimizer", "adamw", "--loss", "ce", "--precision", row["precision"],
                           "--dim", f"batch={args.batch}", "--dim", f"seq={args.seq}", "--json"]
                p = subprocess.run(a, capture_output=True, text=True, env=nccl_env())
                pred = dict(model=row["model"], precision=row["precision"], wrap=row["wrap"], command=" ".join(a[len(cmd):]))
                try:
                    j = json.loads(p.stdout)
                    pred.update(ranks=j.get("ranks"), pytorch_peak_bytes=j.get("pytorch_peak_bytes"),
                                communication=j.get("communication"))
                except ValueError:
                    pred["error"] = p.stderr.strip()[-1000:]
                preds.append(pred)
            out["prediction"] = preds
        else:
            out["prediction"] = "skipped: this memplan has no `plan --gpus`"
        runs = []
        for precision in (("fp32",) if args.quick else ("fp32", "bf16")):
            grads_dp, grads_one = os.path.join(tmp, f"dp_{precision}"), os.path.join(tmp, f"one_{precision}")
            dp = memplan_train(cmd, onnx_path, world, args, tmp, precision, f"dp_{precision}", save=grads_dp)
            one = memplan_train(cmd, onnx_path, world, args, tmp, precision, f"one_{precision}", combined=True, save=grads_one)
            row = dict(model="gpt2", precision=precision, world_size=world, batch_per_gpu=args.batch, seq=args.seq,
                       data_parallel=dp, single_gpu_combined_batch=one)
            if os.path.isdir(grads_dp) and os.path.isdir(grads_one):
                row["gradients_vs_single_gpu"] = compare_grads(grads_one, grads_dp)
            ok = [r for r in dp["ranks"] if "error" not in r]
            if ok:
                row["step_seconds_max_rank"] = max(r["step_seconds"] for r in ok)
                # What each rank's device held beyond its plan: CUDA context, cuBLAS/cuDNN, NVRTC modules, NCCL buffers.
                row["device_bytes_over_plan"] = [r["peak_device_bytes"] - r["planned_peak_bytes"] for r in ok if "peak_device_bytes" in r]
                ddp = [t for t in results.get("torch", []) if t["model"] == "gpt2" and t["precision"] == precision and t["wrap"] == "ddp"]
                times = [r["step_seconds"] for t in ddp for r in t["per_rank"] if "step_seconds" in r]
                if times:
                    row["torch_ddp_step_seconds"] = max(times)
                    row["step_time_vs_torch_ddp"] = row["step_seconds_max_rank"] / max(times)
            print(f"memplan gpt2 {precision}: " + json.dumps({k: v for k, v in row.items() if k in (
                "step_seconds_max_rank", "step_time_vs_torch_ddp", "device_bytes_over_plan", "gradients_vs_single_gpu")}), flush=True)
            runs.append(row)
            for d in (grads_dp, grads_one):
                shutil.rmtree(d, ignore_errors=True)
        out["runtime"] = runs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["memplan"] = out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "multi_gpu.json"))
    ap.add_argument("--memplan", default="", help="the memplan command (default: scripts/memplan_carried.sh or build/memplan)")
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--batch", type=int, default=4, help="per GPU")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--memplan-steps", type=int, default=6)
    ap.add_argument("--memplan-timeout", type=int, default=300)
    ap.add_argument("--memplan-backend", default="cuda", help="cpu: a dry run of the memplan part without a GPU (world 1)")
    ap.add_argument("--quick", action="store_true", help="4-layer models, fp32 only for memplan: a smoke test")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-memplan", action="store_true")
    args = ap.parse_args()
    args.models = [m for m in args.models.split(",") if m]
    import torch

    results = dict(date=datetime.date.today().isoformat(), torch_version=torch.__version__, quick=args.quick,
                   batch_per_gpu=args.batch, seq=args.seq)
    rank, world = 0, int(os.environ.get("WORLD_SIZE", 1))
    t0 = time.time()
    if not args.skip_torch:
        rank, world = run_torch(args, results)
    if rank != 0:
        return
    results.setdefault("device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (no GPU)")
    results.setdefault("gpus", world)
    results["torch_seconds"] = time.time() - t0
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:  # the PyTorch part kept even if the memplan part is cut off
        json.dump(results, f, indent=2)
    if not args.skip_memplan:
        run_memplan(args, results, world)
    results["seconds"] = time.time() - t0
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {args.out} ({results['seconds']:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
