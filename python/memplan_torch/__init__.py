"""memplan inside PyTorch: a planned-arena CUDA allocator (use_planned_allocator, step, stats, save_trace),
graphs straight from PyTorch (export_graph), a training step's memory without the GPU (estimate_step) and plans
that make it meet a budget by recompute and offload (plan_step, load_plan), and a language model's head and loss
over chunks of tokens (linear_cross_entropy, lm_head_loss). torch is imported lazily: importing this package needs
no torch."""
from ._lib import MemplanTorchError, UnmappedOps
from .allocator import (is_installed, reserved_bytes, save_trace, stats, step, step_begin, step_end,
                        use_planned_allocator)


def export_graph(model, example_inputs, path, train=True, **kw):
    from .export import export_graph as _export

    return _export(model, example_inputs, path, train=train, **kw)


export_graph.__doc__ = "See memplan_torch.export.export_graph."


def estimate_step(model, example_inputs, **kw):
    from .estimate import estimate_step as _estimate

    return _estimate(model, example_inputs, **kw)


estimate_step.__doc__ = "See memplan_torch.estimate.estimate_step."


def __getattr__(name):
    if name == "DataParallel":
        from .data_parallel import DataParallel

        return DataParallel
    if name in ("linear_cross_entropy", "lm_head_loss"):
        from . import chunked_loss

        return getattr(chunked_loss, name)
    raise AttributeError(f"module 'memplan_torch' has no attribute {name!r}")


def plan_step(model, example_inputs, **kw):
    from .step_plan import plan_step as _plan

    return _plan(model, example_inputs, **kw)


plan_step.__doc__ = "See memplan_torch.step_plan.plan_step."


def load_plan(path):
    from .step_plan import load_plan as _load

    return _load(path)


load_plan.__doc__ = "See memplan_torch.step_plan.load_plan: a StepPlan saved by StepPlan.save."

__all__ = ["DataParallel", "MemplanTorchError", "UnmappedOps", "estimate_step", "export_graph", "is_installed",
           "linear_cross_entropy", "lm_head_loss", "load_plan",
           "plan_step", "reserved_bytes", "save_trace", "stats", "step", "step_begin", "step_end", "use_planned_allocator"]
__version__ = "0.1.0"
