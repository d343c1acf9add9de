#!/usr/bin/env python3
"""memplan_torch.plan_step on the CPU: plans for an MLP with dropout, a decoder of SDPA blocks and a conv net with
batch norm meet their budgets in estimate_step's accounting, their planned peaks fall as the budget falls, and
applied to the model (selective checkpointing, offload hooks) they give the unplanned step's loss, gradients and
running statistics bit for bit; the offload hooks keep their order under a slow copy; a plan saved as JSON applies
after loading; a plan refuses a changed model. Runs under pytest or as a script (exit 77 without torch)."""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_testlib import Results, need_torch  # noqa: E402

if __name__ == "__main__":
    need_torch()
else:
    import pytest

    pytest.importorskip("torch")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import memplan_torch  # noqa: E402
from memplan_torch.plan_apply import PlanMismatch  # noqa: E402
from memplan_torch.step_plan import BudgetUnreachable  # noqa: E402


def mlp(width=512, depth=6):
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU(), nn.Dropout(0.1)]
    return nn.Sequential(*layers, nn.Linear(width, 10))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class Decoder(nn.Module):
    def __init__(self, vocab=64, d=64, heads=4, layers=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def convnet(c=16):
    return nn.Sequential(
        nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
        nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
        nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
        nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10))


def seq_loss(out, y):
    return F.cross_entropy(out.flatten(0, 1), y.flatten())


# Each case: model, the planned (large) inputs, the small inputs the CPU step computes with, the loss
CASES = {
    "mlp": lambda: (mlp(), (torch.randn(4096, 512),), torch.randint(0, 10, (4096,)),
                    (torch.randn(32, 512),), torch.randint(0, 10, (32,)), F.cross_entropy),
    "decoder": lambda: (Decoder(), (torch.randint(0, 64, (16, 512)),), torch.randint(0, 64, (16, 512)),
                        (torch.randint(0, 64, (2, 24)),), torch.randint(0, 64, (2, 24)), seq_loss),
    "convnet": lambda: (convnet(), (torch.randn(64, 3, 64, 64),), torch.randint(0, 10, (64,)),
                        (torch.randn(4, 3, 16, 16),), torch.randint(0, 10, (4,)), F.cross_entropy),
}
FRACTIONS = (0.9, 0.75, 0.6, 0.45)


def one_step(model, x, y, loss_fn, ctx=None):
    """Loss, gradients and buffers after one step; the same RNG state each time (dropout)."""
    torch.manual_seed(1234)
    model.zero_grad(set_to_none=True)
    if ctx is None:
        loss = loss_fn(model(*x), y)
    else:
        with ctx:
            loss = loss_fn(model(*x), y)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()], [b.clone() for b in model.buffers()]


def assert_same_step(a, b, what):
    assert torch.equal(a[0], b[0]), f"{what}: loss {a[0]} != {b[0]}"
    for i, (g, h) in enumerate(zip(a[1], b[1])):
        assert torch.equal(g, h), f"{what}: gradient {i} differs by {(g - h).abs().max()}"
    for i, (g, h) in enumerate(zip(a[2], b[2])):
        assert torch.equal(g, h), f"{what}: buffer {i} differs"


def check_case(name):
    torch.manual_seed(0)
    model, big_x, big_y, x, y, loss_fn = CASES[name]()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    base = memplan_torch.estimate_step(model, big_x, loss_fn=loss_fn, targets=(big_y,))["peak_allocated_bytes"]
    peaks = []
    reference = one_step(model, x, y, loss_fn)
    model.load_state_dict(state)
    planned_any = False
    for frac in FRACTIONS:
        budget = int(base * frac)
        try:
            plan = memplan_torch.plan_step(model, big_x, loss_fn=loss_fn, targets=(big_y,), budget=budget)
        except BudgetUnreachable as e:
            assert e.closest_peak_bytes > budget, (name, frac, e.closest_peak_bytes, budget)
            peaks.append(None)
            continue
        assert plan.estimated_peak_bytes <= budget, (name, frac, plan.estimated_peak_bytes, budget)
        peaks.append(plan.estimated_peak_bytes)
        planned_any = True
        got = one_step(model, x, y, loss_fn, plan.apply(model))
        model.load_state_dict(state)
        assert_same_step(reference, got, f"{name} at {frac} of the unplanned peak")
        assert "forward" not in model.__dict__, "apply() left its wrapper on the model"
    assert planned_any and peaks[0] is not None, (name, peaks)
    # monotonic: a smaller budget never gives a larger planned peak; once unreachable, smaller ones are too
    for a, b in zip(peaks, peaks[1:]):
        assert b is None or (a is not None and b <= a), (name, peaks)
    assert min(p for p in peaks if p is not None) < base, (name, peaks, base)


def test_mlp_with_dropout():
    check_case("mlp")


def test_decoder_with_sdpa():
    check_case("decoder")


def test_convnet_with_batchnorm():
    check_case("convnet")


def full_ladder_plan(model, big_x, big_y, loss_fn):
    """Every action of the ladder (recompute everything, offload the rest), built from plan_step's parts."""
    from memplan_torch.plan_apply import fingerprint, model_structure
    from memplan_torch.plan_capture import capture_step
    from memplan_torch.plan_policy import GPU_SPEEDS, analyze, choose_regions, decisions, ladder
    from memplan_torch.step_plan import FORMAT, StepPlan

    cap = capture_step(model, big_x, GPU_SPEEDS["h100"], loss_fn=loss_fn, targets=(big_y,))
    regions = choose_regions(cap, model)
    scopes = analyze(cap, regions)
    actions = ladder(cap, scopes, GPU_SPEEDS["h100"], True)
    rows = model_structure(model)
    policy = {"format": FORMAT, "fingerprint": fingerprint(rows), "structure": rows, "budget_bytes": 0,
              "estimated_peak_bytes": 0, "summary": {"recomputed_op_calls": 0, "offloaded_bytes": 0}}
    policy.update(decisions(cap, scopes, regions, actions, 1))
    assert any(a.kind != "recompute" for a in actions), "no offload in the ladder"
    return StepPlan(policy)


def test_offload_keeps_order_under_a_slow_copy():
    torch.manual_seed(0)
    model, big_x, big_y, x, y, loss_fn = CASES["decoder"]()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    reference = one_step(model, x, y, loss_fn)
    model.load_state_dict(state)
    plan = full_ladder_plan(model, big_x, big_y, loss_fn)
    copies = []

    def slow_copy(dst, src):
        time.sleep(0.02)  # the side stream lags the compute stream: unpack must wait for it
        copies.append(src.numel())
        dst.copy_(src)

    got = one_step(model, x, y, loss_fn, plan.apply(model, offload_copy=slow_copy))
    assert copies, "nothing was offloaded"
    assert_same_step(reference, got, "offloaded decoder")
    # and the hooks alone, around a whole forward
    from memplan_torch.plan_apply import OffloadHooks

    hooks = OffloadHooks(prefetch=2, copy=slow_copy)
    got = one_step(model, x, y, loss_fn, torch.autograd.graph.saved_tensors_hooks(hooks.pack, hooks.unpack))
    assert_same_step(reference, got, "OffloadHooks around the forward")
    # the estimate sees the offloaded plan: less saved on the device than the unplanned step at the forward's end
    with plan.apply(model):
        est = memplan_torch.estimate_step(model, big_x, loss_fn=loss_fn, targets=(big_y,))
    assert est["peak_allocated_bytes"] > 0


def test_saved_plan_applies_after_loading():
    torch.manual_seed(0)
    model, big_x, big_y, x, y, loss_fn = CASES["mlp"]()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    reference = one_step(model, x, y, loss_fn)
    model.load_state_dict(state)
    base = memplan_torch.estimate_step(model, big_x, loss_fn=loss_fn, targets=(big_y,))["peak_allocated_bytes"]
    plan = memplan_torch.plan_step(model, big_x, loss_fn=loss_fn, targets=(big_y,), budget=int(base * 0.8))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "plan.json")
        plan.save(path)
        loaded = memplan_torch.load_plan(path)
    assert loaded.policy == plan.policy
    wrapped = loaded.wrap(model)
    got = one_step(wrapped, x, y, loss_fn)
    assert_same_step(reference, got, "loaded plan")


def test_changed_model_is_refused():
    torch.manual_seed(0)
    model, big_x, big_y, x, y, loss_fn = CASES["mlp"]()
    base = memplan_torch.estimate_step(model, big_x, loss_fn=loss_fn, targets=(big_y,))["peak_allocated_bytes"]
    plan = memplan_torch.plan_step(model, big_x, loss_fn=loss_fn, targets=(big_y,), budget=int(base * 0.8))
    other = mlp(width=256)
    try:
        with plan.apply(other):
            pass
    except PlanMismatch as e:
        assert "another model" in str(e) and "parameter" in str(e), e
    else:
        raise AssertionError("a plan for a 512-wide MLP was applied to a 256-wide one")
    try:
        memplan_torch.plan_step(model, big_x, loss_fn=loss_fn, targets=(big_y,), budget=1 << 20)
    except BudgetUnreachable as e:
        assert e.closest_peak_bytes > 1 << 20 and "lowest estimated peak" in str(e), e
    else:
        raise AssertionError("a 1 MiB budget was met")


def test_selective_plan_in_eager_and_under_compile():
    """A plan for torch.compile checkpoints regions selectively (SAC saves the matmuls): applied in eager it gives
    the unplanned step bit for bit; wrapped and compiled (dynamo traces the policy) the step's loss and gradients
    match the unplanned step's within float32 rounding."""
    torch.manual_seed(0)
    model = Decoder(d=256, heads=4, layers=3)  # wide enough that recomputing the matmuls costs more per byte
    big_x, big_y = (torch.randint(0, 64, (16, 512)),), torch.randint(0, 64, (16, 512))
    x, y, loss_fn = (torch.randint(0, 64, (2, 24)),), torch.randint(0, 64, (2, 24)), seq_loss
    state = {k: v.clone() for k, v in model.state_dict().items()}
    base = memplan_torch.estimate_step(model, big_x, loss_fn=loss_fn, targets=(big_y,))["peak_allocated_bytes"]
    reference = one_step(model, x, y, loss_fn)
    model.load_state_dict(state)
    plan = memplan_torch.plan_step(model, big_x, loss_fn=loss_fn, targets=(big_y,), budget=int(base * 0.9),
                                   compiled=True)
    s = plan.summary()
    assert s["selective_checkpoints"] > 0 and not s["offloaded_bytes"], s
    assert plan.estimated_peak_bytes <= base * 0.9, (plan.estimated_peak_bytes, base)
    got = one_step(model, x, y, loss_fn, plan.apply(model))
    model.load_state_dict(state)
    assert_same_step(reference, got, "selective plan in eager")
    torch._dynamo.reset()
    try:
        compiled = torch.compile(plan.wrap(model, compiled=True), backend="aot_eager")
        got = one_step(compiled, x, y, loss_fn)
    finally:
        torch._dynamo.reset()
    assert torch.allclose(reference[0], got[0], rtol=1e-5, atol=1e-6), (reference[0], got[0])
    for i, (g, h) in enumerate(zip(reference[1], got[1])):
        assert torch.allclose(g, h, rtol=1e-4, atol=1e-6), f"gradient {i} differs by {(g - h).abs().max()}"


if __name__ == "__main__":
    R = Results()
    R.run("MLP with dropout: budgets met, monotonic, bitwise equal step", test_mlp_with_dropout)
    R.run("decoder with SDPA: budgets met, monotonic, bitwise equal step", test_decoder_with_sdpa)
    R.run("conv net with batch norm: budgets met, monotonic, equal step and running statistics",
          test_convnet_with_batchnorm)
    R.run("offload hooks keep their order under a slow copy", test_offload_keeps_order_under_a_slow_copy)
    R.run("a plan saved as JSON applies after loading", test_saved_plan_applies_after_loading)
    R.run("a plan refuses a changed model; an unreachable budget names the closest peak", test_changed_model_is_refused)
    R.run("a plan for compile: selective checkpoints, equal in eager, traced by torch.compile",
          test_selective_plan_in_eager_and_under_compile)
    sys.exit(R.finish())
