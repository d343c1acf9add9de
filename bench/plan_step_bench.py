#!/usr/bin/env python3
"""memplan_torch.plan_step on the GPU against PyTorch's own ways to trade time for memory (issue 32): per model, in
one process, the training step (AdamW, cross-entropy, bf16 autocast) measured as
  (a) eager, no checkpointing; (b) eager, every block checkpointed (non-reentrant torch.utils.checkpoint);
  (c) torch.compile with torch._functorch.config.activation_memory_budget in --compile-budgets;
  (d) memplan's plans applied in eager: one per step of plan_step's ladder (its verified peak as the budget), so
      that every budget (a)-(c) measured has the plan of the largest budget at or below it;
  (e) some of those plans under torch.compile (their checkpoint regions; offload left out).
Each row: the step's peak (torch.cuda.max_memory_allocated over the measured steps), the median step time (CUDA
events, after --warmup steps), the losses (and whether they equal eager's bit for bit), and for memplan the budget,
the estimated peak and the plan's summary. JSON lines on stdout or --out.

    python bench/plan_step_bench.py --model all --out bench/results/plan_step_<gpu>_<date>.jsonl   # the GPU run
    python bench/plan_step_bench.py --model gpt2 --make-plans DIR --gpu h200   # plans made without a GPU ...
    python bench/plan_step_bench.py --model gpt2 --plans DIR --out ...       # ... applied on the GPU machine
    python bench/plan_step_bench.py --smoke                                       # CPU, tiny models, a minute
"""
import argparse
import copy
import gc
import glob
import json
import math
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

MODELS = ("gpt2", "llama", "resnet50")
BLOCKS = ("GPT2Block", "LlamaDecoderLayer", "Bottleneck", "BasicBlock")


class LogitsOnly:
    """Wraps a transformers causal LM so the step's output is the logits tensor (no cache, no ModelOutput)."""

    @staticmethod
    def make(lm):
        import torch

        class Logits(torch.nn.Module):
            def __init__(self, lm):
                super().__init__()
                self.lm = lm

            def forward(self, ids):
                return self.lm(input_ids=ids, use_cache=False).logits

        return Logits(lm)


def build(name, a):
    """model (CPU), inputs, targets, loss_fn at the run's sizes."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    if name in ("gpt2", "llama"):
        import transformers

        if name == "gpt2":
            cfg = (transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=64, vocab_size=128)
                   if a.smoke else transformers.GPT2Config(n_positions=max(1024, a.seq)))
            lm = transformers.GPT2LMHeadModel(cfg)
        else:
            cfg = (transformers.LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                            max_position_embeddings=64)
                   if a.smoke else
                   transformers.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                                            num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                                            max_position_embeddings=max(2048, a.seq)))
            lm = transformers.LlamaForCausalLM(cfg)
        lm.config._attn_implementation = "sdpa"
        model = LogitsOnly.make(lm)
        vocab = cfg.vocab_size
        b, s = (2, 32) if a.smoke else (a.batch, a.seq)
        ids = torch.randint(0, vocab, (b, s))
        targets = torch.randint(0, vocab, (b, s))

        def loss_fn(out, y):
            return F.cross_entropy(out.flatten(0, 1).float(), y.flatten())

        return model, (ids,), (targets,), loss_fn
    import torchvision

    model = torchvision.models.resnet18(num_classes=10) if a.smoke else torchvision.models.resnet50()
    b, hw = (2, 32) if a.smoke else (a.image_batch, 224)
    return model, (torch.randn(b, 3, hw, hw),), (torch.randint(0, 10 if a.smoke else 1000, (b,)),), F.cross_entropy


class HiddenOnly:
    """The same causal LM with its step's output the last hidden states, for memplan_torch's chunked head loss."""

    @staticmethod
    def make(logits_model):
        import torch

        class Hidden(torch.nn.Module):
            def __init__(self, lm):
                super().__init__()
                self.lm = lm

            def forward(self, ids):
                body = getattr(self.lm, "transformer", None) or self.lm.model
                return body(input_ids=ids, use_cache=False).last_hidden_state

        return Hidden(logits_model.lm)


def chunked_loss_fn(model):
    """loss_fn for a HiddenOnly model: memplan_torch's linear_cross_entropy through the LM's head."""
    from memplan_torch.chunked_loss import lm_head_loss

    return lambda hidden, y: lm_head_loss(model.lm.lm_head, hidden, y)


def checkpoint_blocks(model):
    """(b): every block's forward under non-reentrant torch.utils.checkpoint."""
    from torch.utils.checkpoint import checkpoint

    for m in model.modules():
        if type(m).__name__ in BLOCKS:
            fwd = m.forward
            m.forward = (lambda *x, _f=fwd, **kw: checkpoint(_f, *x, use_reentrant=False, **kw))
    return model


def measure(model, inputs, targets, loss_fn, a, device, autocast_dtype):
    """The step of memplan_torch.step_loop (estimate_step's loop): peak over the measured steps, median time."""
    import torch

    from memplan_torch.step_loop import run_steps, to_device

    torch.manual_seed(0)  # the same dropout masks in every configuration
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    cuda = device.startswith("cuda")
    losses, marks = [], []
    phase_peaks, current = {}, [None]

    def lf(out, *y):
        loss = loss_fn(out, *y)
        losses.append(loss.detach())
        return loss

    def on_phase(step, name):
        if cuda and step >= a.warmup:  # the measured steps' peak per phase (host counters: no synchronisation)
            if current[0] is not None:
                phase_peaks[current[0]] = max(phase_peaks.get(current[0], 0), torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()
            current[0] = name
        if name == "inputs":
            if step == a.warmup and cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            marks.append([_event(cuda)])
        elif name == "end":
            marks[-1].append(_event(cuda))

    ac = (lambda: torch.autocast(device.split(":")[0], dtype=autocast_dtype)) if autocast_dtype else None
    run_steps(model, params, inputs, targets, lf, opt, ac, a.warmup + a.steps, lambda o: to_device(o, device),
              on_phase)
    if cuda:
        torch.cuda.synchronize()
    times = [_elapsed(s, e, cuda) for s, e in marks[a.warmup:]]
    return {"peak_allocated_bytes": max(phase_peaks.values()) if cuda else None, "phase_peak_bytes": phase_peaks,
            "median_step_s": statistics.median(times), "losses": [float(x) for x in losses]}


def _event(cuda):
    import torch

    if not cuda:
        return time.perf_counter()
    e = torch.cuda.Event(enable_timing=True)
    e.record()
    return e


def _elapsed(s, e, cuda):
    return (e - s) if not cuda else s.elapsed_time(e) / 1000.0


def run_model(name, a):
    import torch

    from memplan_torch.step_plan import Planner

    device = "cpu" if a.smoke else "cuda"
    if a.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    if not a.smoke:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    ac = getattr(torch, a.autocast) if a.autocast != "none" else None
    cpu_model, inputs, targets, loss_fn = build(name, a)
    cpu_model.train()
    rows = []
    base = {"model": name, "deterministic": a.deterministic, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "torch": torch.__version__, "batch": inputs[0].shape[0],
            "seq": inputs[0].shape[1] if inputs[0].dim() == 2 else None, "autocast": a.autocast}

    def fresh():
        return copy.deepcopy(cpu_model).to(device).train()

    def emit(config, extra, fn):
        row = dict(base, config=config, **extra)
        if device == "cuda":  # what earlier configurations left (cycles through wrapped forwards, compile caches)
            gc.collect()
            torch.cuda.empty_cache()
            row["leftover_bytes"] = torch.cuda.memory_allocated()
        try:
            row.update(fn())
        except Exception as e:  # a configuration that fails is a result too (compile, an unreachable budget)
            row["error"] = f"{type(e).__name__}: {str(e)[:500]}"
        if "losses" in row and rows and "losses" in rows[0]:
            ref = rows[0]["losses"]
            row["losses_equal_eager"] = row["losses"] == ref
            row["loss_max_rel_diff"] = max((abs(x - r) / max(abs(r), 1e-30) for x, r in zip(row["losses"], ref)),
                                           default=None)
        rows.append(row)
        print(json.dumps(row), file=a.out_file, flush=True)
        if device == "cuda":
            torch.cuda.empty_cache()
        return row

    run_plan = run_plan_factory(fresh, inputs, targets, loss_fn, a, device, ac)
    want = set(a.configs)
    emit("eager", {}, lambda: measure(fresh(), inputs, targets, loss_fn, a, device, ac))
    if "checkpoint" in want:
        emit("per_layer_checkpoint", {}, lambda: measure(checkpoint_blocks(fresh()), inputs, targets, loss_fn, a,
                                                          device, ac))
    if "chunked_loss" in want and hasattr(cpu_model, "lm"):
        def chunked(checkpointed):
            m = HiddenOnly.make(fresh())
            return measure(checkpoint_blocks(m) if checkpointed else m, inputs, targets, chunked_loss_fn(m), a, device, ac)
        emit("chunked_loss", {}, lambda: chunked(False))
        emit("chunked_loss_per_layer_checkpoint", {}, lambda: chunked(True))
        for b in a.compile_budgets if "compile" in want else ():
            def chunked_compiled(b=b):
                torch._dynamo.reset()
                torch._functorch.config.activation_memory_budget = b
                try:
                    m = HiddenOnly.make(fresh())
                    return measure(torch.compile(m, backend=a.compile_backend), inputs, targets, chunked_loss_fn(m), a,
                                   device, ac)
                finally:
                    torch._functorch.config.activation_memory_budget = 1.0
                    torch._dynamo.reset()
            emit("chunked_loss_compile", {"activation_memory_budget": b}, chunked_compiled)
    plans = load_plans(a.plans, name) if a.plans else None
    if "memplan" in want or "memplan_compile" in want:
        if plans is None:
            plans = make_plans(cpu_model, inputs, targets, loss_fn, ac, a, rows)
        for plan in spread(plans, a.memplan_plans) if a.memplan_plans else plans:
            if "memplan" in want:
                emit("memplan_eager", plan_fields(plan), lambda plan=plan: run_plan(plan, False))
        # under compile offload is left out: the plans that recompute and offload nothing
        recompute_only = [p for p in plans if p.summary()["recomputed_op_calls"] and not p.summary()["offloaded_bytes"]]
        for plan in spread(recompute_only, a.memplan_compile) if "memplan_compile" in want else ():
            emit("memplan_compile", plan_fields(plan), lambda plan=plan: run_plan(plan, True))
    for b in a.compile_budgets if "compile" in want else ():
        def run_compiled(b=b):
            torch._dynamo.reset()
            torch._functorch.config.activation_memory_budget = b
            try:
                return measure(torch.compile(fresh(), backend=a.compile_backend), inputs, targets, loss_fn, a,
                               device, ac)
            finally:
                torch._functorch.config.activation_memory_budget = 1.0
                torch._dynamo.reset()
        emit("compile", {"activation_memory_budget": b}, run_compiled)
    return rows


def run_plan_factory(fresh, inputs, targets, loss_fn, a, device, ac):
    import torch

    def run_plan(plan, compiled):
        out = {}
        if compiled:
            torch._dynamo.reset()
            try:
                model = torch.compile(plan.wrap(fresh(), compiled=True), backend=a.compile_backend)
                out.update(measure(model, inputs, targets, loss_fn, a, device, ac))
            finally:
                torch._dynamo.reset()
        else:
            model = fresh()
            with plan.apply(model):
                out.update(measure(model, inputs, targets, loss_fn, a, device, ac))
        if out.get("peak_allocated_bytes") is not None:
            out["within_budget"] = out["peak_allocated_bytes"] <= plan.budget_bytes
        return out
    return run_plan


def plan_fields(plan):
    p = plan.policy
    return {"budget_bytes": plan.budget_bytes, "estimated_peak_bytes": plan.estimated_peak_bytes,
            "steps_taken": p.get("steps_taken"), "plan_summary": plan.summary(), "planned_on": p.get("planned_on")}


def spread(plans, k):
    """k plans spread evenly over the list (largest budget first), the last (lowest) included."""
    if k <= 0 or not plans:
        return []
    if k >= len(plans):
        return list(plans)
    return [plans[round(i * (len(plans) - 1) / (k - 1))] for i in range(k)] if k > 1 else [plans[-1]]


def make_plans(cpu_model, inputs, targets, loss_fn, ac, a, rows=()):
    """One plan per step of plan_step's ladder (its verified peak as the budget), largest budget first; the
    measured peaks of earlier rows are budgets too (plan_step at exactly what they measured)."""
    import platform

    import torch

    from memplan_torch.step_plan import BudgetUnreachable, Planner

    t0 = time.perf_counter()
    planner = Planner(cpu_model, inputs, loss_fn=loss_fn, targets=targets,
                      optimizer=lambda ps: torch.optim.AdamW(ps, lr=1e-4), autocast_dtype=ac, gpu=a.gpu,
                      max_estimates=64, compiled=a.for_compile)
    # the budget whose margin leaves exactly step j's verified peak
    budgets = {math.ceil(planner.peak(j) / (1 - planner.margin)) + 1 for j in range(len(planner.taken))}
    budgets |= {r["peak_allocated_bytes"] for r in rows if r.get("peak_allocated_bytes")}
    plans, seen = [], set()
    for b in sorted(budgets, reverse=True):
        try:
            plan = planner.plan(b)
        except BudgetUnreachable:
            continue
        key = plan.policy["steps_taken"]
        if key in seen:
            continue
        seen.add(key)
        plan.policy["planned_on"] = f"{platform.node() or 'host'} ({platform.processor() or platform.machine()})"
        plan.policy["planning_s"] = round(time.perf_counter() - t0, 2)
        plans.append(plan)
    return plans


def save_plans(plans, folder, name):
    os.makedirs(folder, exist_ok=True)
    for i, plan in enumerate(plans):
        plan.save(os.path.join(folder, f"{name}.{i:03d}.json"))


def load_plans(folder, name):
    from memplan_torch.step_plan import load_plan

    paths = sorted(glob.glob(os.path.join(folder, f"{name}.[0-9][0-9][0-9].json")))
    if not paths:
        raise SystemExit(f"no plans for {name} in {folder} (make them with --make-plans {folder})")
    return sorted((load_plan(p) for p in paths), key=lambda p: -p.budget_bytes)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="all", choices=("all",) + MODELS)
    ap.add_argument("--batch", type=int, default=8, help="decoders' batch (default 8)")
    ap.add_argument("--seq", type=int, default=1024, help="decoders' sequence length (default 1024)")
    ap.add_argument("--image-batch", type=int, default=64, help="ResNet-50's batch (default 64)")
    ap.add_argument("--autocast", default="bfloat16", choices=("bfloat16", "float16", "none"))
    ap.add_argument("--compile-budgets", default="1.0,0.8,0.6,0.4,0.2,0.1,0.0")
    ap.add_argument("--compile-backend", default="inductor")
    ap.add_argument("--configs", default="checkpoint,compile,memplan,memplan_compile",
                    help="which configurations run besides eager (default all but chunked_loss): checkpoint, compile, "
                    "memplan, memplan_compile, chunked_loss (decoders: the head and cross-entropy through "
                    "memplan_torch.linear_cross_entropy, with and without per-block checkpointing)")
    ap.add_argument("--plans", default=None, help="read memplan's plans from this folder (MODEL.NNN.json, made by "
                    "--make-plans) instead of planning here")
    ap.add_argument("--make-plans", default=None, metavar="DIR", help="plan only: one plan per step of plan_step's "
                    "ladder, written to DIR for --plans (a plan made on a laptop is applied on the GPU machine)")
    ap.add_argument("--memplan-plans", type=int, default=0, help="run only this many of the plans in eager, "
                    "spread over the budgets (default 0: all)")
    ap.add_argument("--deterministic", action="store_true", help="torch.use_deterministic_algorithms(True) (and "
                    "cuBLAS's fixed workspace): losses bit for bit where the recompute replays the same kernels")
    ap.add_argument("--for-compile", action="store_true", help="with --make-plans: plans for torch.compile "
                    "(plan_step(compiled=True): selective checkpointing, no offload)")
    ap.add_argument("--memplan-compile", type=int, default=3, help="how many of the plans also run under "
                    "torch.compile, spread over the budgets (default 3)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--gpu", default="h100", help="the GPU rules memplan plans with (h100, h200)")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny models, aot_eager_decomp_partition for "
                    "compile: checks the script end to end")
    ap.add_argument("--out", default=None, help="append JSON lines here (default stdout)")
    a = ap.parse_args()
    a.compile_budgets = [float(x) for x in a.compile_budgets.split(",") if x]
    a.configs = [x for x in a.configs.split(",") if x]
    unknown = set(a.configs) - {"checkpoint", "compile", "memplan", "memplan_compile", "chunked_loss"}
    if unknown:
        ap.error(f"unknown --configs {', '.join(sorted(unknown))}")
    if a.smoke:
        a.warmup, a.steps = 1, 2
        a.compile_backend = "aot_eager_decomp_partition"
        a.compile_budgets = a.compile_budgets[:1] + a.compile_budgets[-1:]
    if a.model == "all":  # one process per model: each starts with an empty caching allocator and compile cache
        rest, skip = [], False
        for x in sys.argv[1:]:
            if skip or x.startswith("--model"):
                skip = x == "--model"
                continue
            rest.append(x)
        rc = 0
        for m in MODELS:
            rc |= subprocess.call([sys.executable, os.path.abspath(__file__), "--model", m] + rest)
        return rc
    if a.make_plans:
        import torch

        cpu_model, inputs, targets, loss_fn = build(a.model, a)
        cpu_model.train()
        ac = getattr(torch, a.autocast) if a.autocast != "none" else None
        plans = make_plans(cpu_model, inputs, targets, loss_fn, ac, a)
        save_plans(plans, a.make_plans, a.model)
        for p in plans:
            print(f"{a.model}: budget {p.budget_bytes / 2**20:.0f} MiB, step {p.policy['steps_taken']}, "
                  f"{p.summary()}")
        return 0
    a.out_file = open(a.out, "a") if a.out else sys.stdout
    run_model(a.model, a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
