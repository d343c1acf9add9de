"""PyTorch's measured memory for every zoo model and case, on a CUDA GPU (the truth estimate_step is held to).

    python3 bench/zoo_truth.py --out truth.jsonl [--jobs 16] [--ids FILE] [--timeout 300]

Each zoo entry runs in its own process (a crash, hang or out-of-memory costs that entry alone), both cases one
after the other, through memplan_torch.step_loop.run_steps, the loop estimate_step predicts: 3 steps, the last
measured (allocated before it, torch.cuda.max_memory_allocated and max_memory_reserved over it). fp32 with TF32
off. The kernels PyTorch ran for scaled-dot-product attention are recorded from the first step.
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

STEPS = 3
SDPA_OPS = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math",
            "_scaled_dot_product_fused_attention_overrideable", "_flash_attention_forward", "_efficient_attention_forward")


def measure(entry, case):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    import zoo
    from memplan_torch.step_loop import run_steps, to_device

    model, trained, inputs, targets, loss_fn, opt, autocast = zoo.cuda_case(entry, case)
    kernels = {}

    class Kernels(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func._overloadpacket.__name__
            if name in SDPA_OPS:
                kernels[name] = kernels.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    rec = {}
    mode = [None]

    def on_phase(step, name):
        if step == 0 and name == "forward":
            mode[0] = Kernels()
            mode[0].__enter__()
        if step == 0 and name == "backward" and mode[0] is not None:
            mode[0].__exit__(None, None, None)
            mode[0] = None
        if step == STEPS - 1 and name == "inputs":
            torch.cuda.synchronize()
            rec["before_step_bytes"] = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        if step == STEPS - 1 and name == "end":
            torch.cuda.synchronize()
            rec["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
            rec["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
            rec["end_allocated_bytes"] = torch.cuda.memory_allocated()

    t0 = time.time()
    out, loss = run_steps(model, trained, inputs, targets, loss_fn, opt, autocast, STEPS,
                          lambda o: to_device(o, "cuda"), on_phase)
    rec["loss"] = float(loss.detach().float())
    rec["seconds"] = time.time() - t0
    rec["sdpa_kernels"] = kernels
    rec["parameter_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    del out, loss, opt, model
    return rec


def run_one(entry, cases):
    import torch

    entry_id = entry["id"]
    res = []
    for case in cases:
        r = {"id": entry_id, "case": case, "device": torch.cuda.get_device_name(0), "torch": torch.__version__}
        try:
            r.update(measure(entry, case))
            r["ok"] = True
        except Exception as e:  # noqa: BLE001 - recorded per entry
            r["ok"] = False
            r["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        res.append(r)
        import gc

        gc.collect()
        torch.cuda.empty_cache()
        if hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
            torch._C._cuda_clearCublasWorkspaces()
        torch.cuda.empty_cache()
    return res


if __name__ == "__main__":
    import zoo

    zoo.main(__file__, run_one, __doc__)
