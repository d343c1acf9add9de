"""The bytes every convolution of a zoo model's training step takes inside the op on a CUDA GPU, beyond its
outputs (the cuDNN workspace, the contiguous copies of non-contiguous operands): the data device_rules'
convolution workspace rule is fitted to and checked against.

    python3 bench/zoo_conv_probe.py --out conv.jsonl [--jobs 8] [--ids FILE]      (on the GPU machine)

Each entry runs as bench/zoo_truth.py runs it (zoo.cuda_case, 3 steps). Step 2 (plans cached in step 1) runs each
convolution_backward as three calls, input gradient, weight gradient and bias gradient apart, to measure each
pass's transient alone; step 3 runs them as PyTorch does and measures the op whole, and the step's peak. Rows:
one per distinct (pass, operands, parameters) of a model and case, with how often it ran.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

STEPS = 3


def _desc(t):
    return {"shape": list(t.shape), "stride": list(t.stride()), "contiguous": t.is_contiguous(),
            "offset": t.storage_offset()}


def measure(entry, case):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    import zoo
    from memplan_torch.step_loop import run_steps, to_device

    model, trained, inputs, targets, loss_fn, opt, autocast = zoo.cuda_case(entry, case)
    rows = {}
    state = {"step": -1, "peak": 0}

    def timed(fn):
        """fn() with the bytes it left allocated and the most it held above that while it ran."""
        state["peak"] = max(state["peak"], torch.cuda.max_memory_allocated())
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = fn()
        after = torch.cuda.memory_allocated()
        return out, after - before, torch.cuda.max_memory_allocated() - after

    def record(kind, x, w, params, out_bytes, transient, extra=None):
        stride, padding, dilation, transposed, output_padding, groups = params
        backend = str(torch._C._select_conv_backend(x, w, None, stride, padding, dilation, transposed,
                                                    output_padding, groups)).split(".")[-1]
        key = json.dumps([kind, _desc(x), _desc(w), str(x.dtype), stride, padding, dilation, transposed, groups,
                          extra], sort_keys=True)
        r = rows.get(key)
        if r is None:
            r = rows[key] = {"pass": kind, "x": _desc(x), "w": _desc(w), "dtype": str(x.dtype)[6:],
                             "stride": list(stride), "padding": list(padding), "dilation": list(dilation),
                             "transposed": transposed, "groups": groups, "backend": backend, "count": 0,
                             "out_bytes": out_bytes, "transient": transient, "transient_max": transient, **(extra or {})}
        r["count"] += 1
        r["transient_max"] = max(r["transient_max"], transient)

    class Convs(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func._overloadpacket.__name__
            if name == "convolution":
                x, w = args[0], args[1]
                params = tuple(args[3:9])
                out, ob, tr = timed(lambda: func(*args, **kwargs))
                record("forward", x, w, params, ob, tr, {"bias": args[2] is not None})
                return out
            if name == "convolution_backward":
                go, x, w = args[0], args[1], args[2]
                params = (args[4], args[5], args[6], args[7], args[8], args[9])
                mask = list(args[10])
                extra = {"grad_output": _desc(go), "mask": mask}
                if state["step"] == 1:  # each gradient alone
                    res = [None, None, None]
                    for i, kind in enumerate(("backward_data", "backward_filter", "backward_bias")):
                        if mask[i]:
                            m = [j == i for j in range(3)]
                            out, ob, tr = timed(lambda m=m: func(*args[:10], m))
                            res[i] = out[i]
                            record(kind, x, w, params, ob, tr, extra)
                    return tuple(res)
                out, ob, tr = timed(lambda: func(*args, **kwargs))
                record("backward", x, w, params, ob, tr, extra)
                return out
            return func(*args, **kwargs)

    mode = [None]

    def on_phase(step, name):
        state["step"] = step
        if step >= 1 and name == "inputs":
            if mode[0] is None:
                mode[0] = Convs()
                mode[0].__enter__()
            if step == STEPS - 1:
                torch.cuda.synchronize()
                state["before"] = torch.cuda.memory_allocated()
                state["peak"] = 0
                torch.cuda.reset_peak_memory_stats()
        if step == STEPS - 1 and name == "end":
            mode[0].__exit__(None, None, None)
            state["peak"] = max(state["peak"], torch.cuda.max_memory_allocated())

    run_steps(model, trained, inputs, targets, loss_fn, opt, autocast, STEPS, lambda o: to_device(o, "cuda"),
              on_phase)
    del model, opt
    return list(rows.values()), state["peak"], state["before"]


def run_one(entry, cases):
    import gc

    import torch

    res = []
    for case in cases:
        r = {"id": entry["id"], "case": case, "device": torch.cuda.get_device_name(0)}
        try:
            convs, peak, before = measure(entry, case)
            r.update({"ok": True, "peak_allocated_bytes": peak, "before_step_bytes": before, "convs": convs})
        except Exception as e:  # noqa: BLE001 - recorded per entry
            r.update({"ok": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"})
        res.append(r)
        gc.collect()
        torch.cuda.empty_cache()
    return res


if __name__ == "__main__":
    import zoo

    zoo.main(__file__, run_one, __doc__)
