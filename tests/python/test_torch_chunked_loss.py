#!/usr/bin/env python3
"""memplan_torch.linear_cross_entropy on the CPU: the loss and the gradients of the hidden states, the head's weight
and its bias equal F.cross_entropy(F.linear(...)) for every chunk size (one token, uneven, one chunk), with ignored
labels, both reductions and a scaled backward; under bf16 autocast they match autocast's own step within bf16's
precision and the gradients keep the parameters' dtype; a head tied to the embedding gets both gradients; a second
backward through the same loss is refused; bad shapes are refused naming them. estimate_step of a decoder whose loss
goes through it peaks lower than the same decoder's logits step by at least the logits' bytes (the memory the chunks
exist to remove); plan_step plans such a step and the applied plan gives its loss and gradients bit for bit. Runs under pytest or as a script (exit 77 without torch)."""
import os
import sys

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
from memplan_torch.chunked_loss import linear_cross_entropy, lm_head_loss  # noqa: E402


def reference_and_chunked(h, w, b, y, chunk, reduction, scale=1.0, autocast=False):
    leaves = [t.detach().clone().requires_grad_() for t in (h, w) + ((b,) if b is not None else ())]
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else torch.autocast("cpu", enabled=False)
    with ctx:
        ref = F.cross_entropy(F.linear(leaves[0], leaves[1], leaves[2] if b is not None else None).reshape(-1, w.shape[0]).float(),
                              y.reshape(-1), reduction=reduction)
    want = torch.autograd.grad(ref * scale, leaves)
    mine = [t.detach().clone().requires_grad_() for t in leaves]
    with ctx:
        got = linear_cross_entropy(mine[0], mine[1], y, mine[2] if b is not None else None, chunk_tokens=chunk, reduction=reduction)
    (got * scale).backward()
    return ref, got, want, [t.grad for t in mine], mine


def test_equal_to_cross_entropy():
    torch.manual_seed(0)
    B, S, H, V = 3, 7, 16, 50
    for bias in (True, False):
        for reduction in ("mean", "sum"):
            for chunk in (1, 4, 21, 1000):
                h, w = torch.randn(B, S, H), torch.randn(V, H)
                b = torch.randn(V) if bias else None
                y = torch.randint(0, V, (B, S))
                y[0, :3] = -100
                ref, got, want, grads, _ = reference_and_chunked(h, w, b, y, chunk, reduction, scale=1.5)
                assert abs(float(got.detach()) - float(ref.detach())) <= 1e-5 * abs(float(ref.detach())), (bias, reduction, chunk)
                for i, (g, r) in enumerate(zip(grads, want)):
                    err = float((g - r).abs().max() / r.abs().max())
                    assert err <= 1e-5, f"bias={bias} {reduction} chunk={chunk}: gradient {i} off by {err:.3g}"


def test_bf16_autocast():
    torch.manual_seed(1)
    h, w, y = torch.randn(4, 9, 32), torch.randn(70, 32), torch.randint(0, 70, (4, 9))
    ref, got, want, grads, leaves = reference_and_chunked(h, w, torch.randn(70), y, 5, "mean", autocast=True)
    assert abs(float(got.detach()) - float(ref.detach())) <= 1e-2 * abs(float(ref.detach()))
    for i, (g, r) in enumerate(zip(grads, want)):
        assert g.dtype == leaves[i].dtype, (i, g.dtype)
        err = float((g - r).abs().max() / r.abs().max())
        assert err <= 2e-2, f"gradient {i} off by {err:.3g} under bf16 autocast"


def test_tied_head_and_refusals():
    torch.manual_seed(2)
    emb = nn.Embedding(40, 8)
    head = nn.Linear(8, 40, bias=False)
    head.weight = emb.weight  # tied, as GPT-2's head is
    ids = torch.randint(0, 40, (2, 6))
    hidden = torch.tanh(emb(ids))
    ref = F.cross_entropy(head(hidden).reshape(-1, 40), ids.reshape(-1))
    want = torch.autograd.grad(ref, emb.weight)[0]
    hidden = torch.tanh(emb(ids))
    loss = lm_head_loss(head, hidden, ids, chunk_tokens=5)
    got = torch.autograd.grad(loss, emb.weight, retain_graph=True)[0]
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-7), float((got - want).abs().max())
    try:
        torch.autograd.grad(loss, emb.weight)
        raise AssertionError("a second backward through the same loss was not refused")
    except RuntimeError as e:
        assert "second backward" in str(e), e
    for bad, words in (((torch.randn(2, 3, 8), torch.randn(40, 7), torch.zeros(2, 3, dtype=torch.long)), "weight must be"),
                       ((torch.randn(2, 3, 8), torch.randn(40, 8), torch.zeros(3, 2, dtype=torch.long)), "labels")):
        try:
            linear_cross_entropy(*bad)
            raise AssertionError(f"{words}: not refused")
        except ValueError as e:
            assert words in str(e), e


class TinyDecoder(nn.Module):
    def __init__(self, vocab=4096, width=64, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(),
                                                  nn.Linear(4 * width, width)) for _ in range(layers))
        self.head = nn.Linear(width, vocab, bias=False)

    def hidden(self, ids):
        x = self.emb(ids)
        for blk in self.blocks:
            x = x + blk(x)
        return x

    def forward(self, ids):
        return self.head(self.hidden(ids))


class HiddenOf(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids):
        return self.m.hidden(ids)


def test_estimate_removes_the_logits():
    torch.manual_seed(3)
    m = TinyDecoder()
    ids, y = torch.randint(0, 4096, (4, 256)), torch.randint(0, 4096, (4, 256))
    kw = dict(targets=(y,), optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3), autocast_dtype=torch.bfloat16)
    full = memplan_torch.estimate_step(m, (ids,), loss_fn=lambda o, t: F.cross_entropy(o.reshape(-1, 4096).float(), t.reshape(-1)), **kw)
    hm = HiddenOf(m)
    chunked = memplan_torch.estimate_step(hm, (ids,), loss_fn=lambda o, t: lm_head_loss(m.head, o, t, chunk_tokens=128), **kw)
    logits_bytes = 4 * 256 * 4096 * 2  # bf16 logits
    assert chunked["peak_allocated_bytes"] + logits_bytes <= full["peak_allocated_bytes"], (
        chunked["peak_allocated_bytes"], full["peak_allocated_bytes"])


def test_plan_step_with_chunked_loss():
    torch.manual_seed(4)
    m = TinyDecoder(vocab=2048, width=64, layers=4)
    hm = HiddenOf(m)
    ids, y = torch.randint(0, 2048, (4, 128)), torch.randint(0, 2048, (4, 128))

    def loss_fn(o, t):
        return lm_head_loss(m.head, o, t, chunk_tokens=64)
    base = memplan_torch.estimate_step(hm, (ids,), loss_fn=loss_fn, targets=(y,))["peak_allocated_bytes"]
    plan = memplan_torch.plan_step(hm, (ids,), loss_fn=loss_fn, targets=(y,), budget=int(base * 0.96))
    assert plan.estimated_peak_bytes <= base * 0.96, (plan.estimated_peak_bytes, base)

    def step(ctx=None):
        for p in m.parameters():
            p.grad = None
        if ctx is None:
            loss = loss_fn(hm(ids), y)
        else:
            with ctx:
                loss = loss_fn(hm(ids), y)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in m.parameters()]
    a, b = step(), step(plan.apply(hm))
    assert torch.equal(a[0], b[0]), (a[0], b[0])
    for i, (g, h) in enumerate(zip(a[1], b[1])):
        assert torch.equal(g, h), f"gradient {i} differs by {(g - h).abs().max()}"


if __name__ == "__main__":
    R = Results()
    R.run("equal to F.cross_entropy(F.linear(...)) at every chunk size, both reductions, ignored labels", test_equal_to_cross_entropy)
    R.run("bf16 autocast: within bf16's precision, gradients in the parameters' dtype", test_bf16_autocast)
    R.run("a tied head gets the embedding's gradient; a second backward and bad shapes are refused", test_tied_head_and_refusals)
    R.run("estimate_step: the chunked step peaks lower by at least the logits' bytes", test_estimate_removes_the_logits)
    R.run("plan_step over a chunked-loss step: budget met, the applied step's loss and gradients bit for bit", test_plan_step_with_chunked_loss)
    sys.exit(R.finish())
