"""The training loop whose memory estimate_step predicts, shared by the estimate (fake tensors) and by the
measurement on a GPU (bench/zoo_truth.py), so that both run the same step in the same order:

    for each step:
        x, y = inputs.to(device), targets.to(device)      # the previous step's x, y die at the rebinding
        zero_grad(set_to_none=True)
        with autocast(dtype):  out = model(*x); loss = loss_fn(out, *y)
        loss.backward()
        optimizer.step()                                  # when there is one

The previous step's `out` and `loss` stay referenced until the new ones are bound, as in a user's loop.
"""
from contextlib import nullcontext


def to_device(obj, device):
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


def run_steps(forward, params, inputs, targets, loss_fn, optimizer, autocast, steps, place, on_phase=None):
    """forward(*inputs) -> output; params: the trained tensors (their .grad set to None each step); inputs and
    targets: tuples placed by place(obj) each step; optimizer: a built torch optimizer or None; autocast: a
    context-manager factory or None; on_phase(step, name): called as each phase begins ("inputs", "zero_grad",
    "forward", "backward", "optimizer", "end")."""
    phase = on_phase or (lambda step, name: None)
    x = y = out = loss = None
    for step in range(steps):
        phase(step, "inputs")
        x = place(inputs)
        y = place(targets)
        phase(step, "zero_grad")
        for p in params:
            p.grad = None
        phase(step, "forward")
        with (autocast() if autocast else nullcontext()):
            out = forward(*x)
            loss = loss_fn(out, *y)
        phase(step, "backward")
        loss.backward()
        if optimizer is not None:
            phase(step, "optimizer")
            optimizer.step()
        phase(step, "end")
    return out, loss
