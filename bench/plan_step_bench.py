#!/usr/bin/env python3
"""memplan_torch.plan_step on the GPU against PyTorch's own ways to trade time for memory (issue 32): per model, in
one process, the training step (AdamW, cross-entropy, bf16 autocast) measured as
  (a) eager, no checkpointing; (b) eager, every block checkpointed (non-reentrant torch.utils.checkpoint);
  (c) torch.compile with torch._functorch.config.activation_memory_budget in --compile-budgets;
  (d) memplan's plan applied in eager at the peaks (a)-(c) measured, and below them (offload allowed);
  (e) memplan's plan under torch.compile (its checkpoint policy; offload left out) at the peaks (c) measured.
Each row: the step's peak (torch.cuda.max_memory_allocated over the measured steps), the median step time (CUDA
events, after --warmup steps), the losses (and whether they equal eager's bit for bit), and for memplan the budget,
the estimated peak and the plan's summary. JSON lines on stdout or --out.

    python bench/plan_step_bench.py --model all --out bench/results/plan_step_<gpu>_<date>.jsonl   # the GPU run
    python bench/plan_step_bench.py --smoke                                       # CPU, tiny models, a minute
"""
import argparse
import copy
import json
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

    def lf(out, *y):
        loss = loss_fn(out, *y)
        losses.append(loss.detach())
        return loss

    def on_phase(step, name):
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
    return {"peak_allocated_bytes": torch.cuda.max_memory_allocated() if cuda else None,
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
    if not a.smoke:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    ac = getattr(torch, a.autocast) if a.autocast != "none" else None
    cpu_model, inputs, targets, loss_fn = build(name, a)
    cpu_model.train()
    rows = []
    base = {"model": name, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "torch": torch.__version__, "batch": inputs[0].shape[0],
            "seq": inputs[0].shape[1] if inputs[0].dim() == 2 else None, "autocast": a.autocast}

    def fresh():
        return copy.deepcopy(cpu_model).to(device).train()

    def emit(config, extra, fn):
        row = dict(base, config=config, **extra)
        try:
            row.update(fn())
        except Exception as e:  # a configuration that fails is a result too (compile, an unreachable budget)
            row["error"] = f"{type(e).__name__}: {str(e)[:500]}"
        if "losses" in row and rows and "losses" in rows[0]:
            row["losses_equal_eager"] = row["losses"] == rows[0]["losses"]
        rows.append(row)
        print(json.dumps(row), file=a.out_file, flush=True)
        if device == "cuda":
            torch.cuda.empty_cache()
        return row

    emit("eager", {}, lambda: measure(fresh(), inputs, targets, loss_fn, a, device, ac))
    emit("per_layer_checkpoint", {}, lambda: measure(checkpoint_blocks(fresh()), inputs, targets, loss_fn, a,
                                                      device, ac))
    compiled_peaks = []
    for b in a.compile_budgets:
        def run_compiled(b=b):
            torch._dynamo.reset()
            torch._functorch.config.activation_memory_budget = b
            return measure(torch.compile(fresh(), backend=a.compile_backend), inputs, targets, loss_fn, a,
                           device, ac)
        r = emit("compile", {"activation_memory_budget": b}, run_compiled)
        if r.get("peak_allocated_bytes"):
            compiled_peaks.append(r["peak_allocated_bytes"])
    torch._functorch.config.activation_memory_budget = 1.0
    t0 = time.perf_counter()
    planner = Planner(cpu_model, inputs, loss_fn=loss_fn, targets=targets,
                      optimizer=lambda ps: torch.optim.AdamW(ps, lr=1e-4), autocast_dtype=ac, gpu=a.gpu)
    capture_s = time.perf_counter() - t0
    measured = [r["peak_allocated_bytes"] for r in rows if r.get("peak_allocated_bytes")]
    if a.smoke or not measured:  # no GPU peaks to aim at: between the estimated unplanned peak and the floor
        floor = planner.peak(len(planner.actions))
        measured = [planner.baseline, (planner.baseline + floor) // 2, floor]
    lowest = min(measured)
    budgets = sorted(set(measured) | {int(lowest * f) for f in a.below}, reverse=True)
    for budget in budgets:
        def run_plan(budget=budget, compiled=False):
            t = time.perf_counter()
            plan = planner.plan(budget)
            out = {"estimated_peak_bytes": plan.estimated_peak_bytes, "plan_summary": plan.summary(),
                   "plan_s": time.perf_counter() - t, "capture_s": capture_s}
            if compiled:
                torch._dynamo.reset()
                model = torch.compile(plan.wrap(fresh(), compiled=True), backend=a.compile_backend)
                out.update(measure(model, inputs, targets, loss_fn, a, device, ac))
            else:
                model = fresh()
                with plan.apply(model):
                    out.update(measure(model, inputs, targets, loss_fn, a, device, ac))
            if out.get("peak_allocated_bytes") is not None:
                out["within_budget"] = out["peak_allocated_bytes"] <= budget
            return out
        emit("memplan_eager", {"budget_bytes": budget}, run_plan)
        if budget in compiled_peaks or (a.smoke and budget == budgets[0]):
            emit("memplan_compile", {"budget_bytes": budget}, lambda budget=budget: run_plan(budget, True))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="all", choices=("all",) + MODELS)
    ap.add_argument("--batch", type=int, default=8, help="decoders' batch (default 8)")
    ap.add_argument("--seq", type=int, default=1024, help="decoders' sequence length (default 1024)")
    ap.add_argument("--image-batch", type=int, default=64, help="ResNet-50's batch (default 64)")
    ap.add_argument("--autocast", default="bfloat16", choices=("bfloat16", "float16", "none"))
    ap.add_argument("--compile-budgets", default="1.0,0.8,0.6,0.4,0.2,0.1,0.0")
    ap.add_argument("--compile-backend", default="inductor")
    ap.add_argument("--below", default="0.8,0.6,0.45", help="memplan budgets below the lowest measured peak, as "
                    "fractions of it (offload allowed)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--gpu", default="h100", help="the GPU rules memplan plans with (h100, h200)")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny models, aot_eager_decomp_partition for "
                    "compile: checks the script end to end")
    ap.add_argument("--out", default=None, help="append JSON lines here (default stdout)")
    a = ap.parse_args()
    a.compile_budgets = [float(x) for x in a.compile_budgets.split(",") if x]
    a.below = [float(x) for x in a.below.split(",") if x]
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
    a.out_file = open(a.out, "a") if a.out else sys.stdout
    run_model(a.model, a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
