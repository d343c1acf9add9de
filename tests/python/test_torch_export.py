#!/usr/bin/env python3
"""memplan_torch.export_graph: small PyTorch models (CNN, MLP, transformer encoder, causal-SDPA decoder with
RMSNorm, BatchNorm/Dropout) captured with torch.export and written as memplan JSON graphs. Each graph must
import (`memplan analyze`), plan a training step (`memplan plan --train`), and - exported in eval mode with its
weights - give PyTorch's outputs through `memplan run` on the CPU. Exit 77 without torch."""
import json
import os
import sys
import tempfile

from torch_testlib import Results, args, memplan, need_torch

A = args()
need_torch()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import memplan_torch  # noqa: E402

torch.manual_seed(0)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2, self.b2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2), nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
        x = F.avg_pool2d(F.hardswish(self.b2(self.c2(x))), 3, stride=1, padding=1)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 4)
        self.ln = nn.LayerNorm(32)

    def forward(self, x):
        h = F.gelu(self.l1(x))
        h = self.ln(F.silu(self.l2(h)) + h)
        return torch.log_softmax(self.l3(h), dim=-1)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True, activation="gelu")
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 5)

    def forward(self, x):
        return self.head(self.enc(x))


class Block(nn.Module):
    def __init__(self, d=32, hq=4, hkv=2):
        super().__init__()
        self.hq, self.hkv, self.dh = hq, hkv, d // hq
        self.n1, self.n2 = nn.RMSNorm(d, eps=1e-6), nn.RMSNorm(d, eps=1e-6)
        self.q, self.kv = nn.Linear(d, d, bias=False), nn.Linear(d, 2 * hkv * self.dh, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.up, self.gate, self.down = nn.Linear(d, 64, bias=False), nn.Linear(d, 64, bias=False), nn.Linear(64, d, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, s, self.hq, self.dh).transpose(1, 2)
        k, v = self.kv(h).view(b, s, 2, self.hkv, self.dh).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Decoder(nn.Module):
    def __init__(self, vocab=50):
        super().__init__()
        self.emb = nn.Embedding(vocab, 32)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.norm = nn.RMSNorm(32, eps=1e-6)
        self.head = nn.Linear(32, vocab, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


class BNDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4)
        self.drop, self.fc = nn.Dropout(0.25), nn.Linear(4 * 6 * 6, 3)
        self.bn1 = nn.BatchNorm1d(3)

    def forward(self, x):
        x = self.drop(torch.sigmoid(self.bn(self.conv(x))))
        return self.bn1(self.fc(x.flatten(1)))


class Indexing(nn.Module):
    """Advanced indexing over several axes: transformers' mask code (aranges broadcast against each other), the
    indices adjacent (result in their place) and apart (broadcast dims first), one computed from the input; and
    as_strided as a view: a transpose of a slice, an identity with size-1 strides (timm ConvNeXt's head), a
    broadcast (stride 0)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):  # x [2, 5, 6]
        h = self.fc(x)
        b = torch.arange(2).view(2, 1, 1)
        s = torch.arange(3).view(1, 3, 1) + 1
        adjacent = h[b, s, torch.tensor([[[0, 5, -1]]])]          # [2, 3, 3]
        i = (x[:, :3, 0].abs() * 3).clamp(max=4).long()            # [2, 3], data-dependent
        apart = h.unsqueeze(1).expand(2, 3, 5, 6)[:, torch.tensor([0, 2]).view(2, 1), :, torch.tensor([1, 3, 5])]  # [2, 3, 2, 5]
        picked = h[torch.arange(2).view(2, 1), i]                   # [2, 3, 6]
        y = adjacent.sum(-1, keepdim=True) + picked[:, :, :3] + apart.sum((0, 3)).T.unsqueeze(-1)
        g = h.reshape(2, 30)
        a = torch.as_strided(g, (2, 3, 2), (30, 1, 6), 1)          # g[:, 1:13] as [2, 2, 6] sliced, transposed
        m = torch.as_strided(g.mean(-1, keepdim=True).unsqueeze(-1), (2, 1, 1), (1, 2, 2))
        e = torch.as_strided(g, (2, 3, 3), (30, 0, 1), 4)          # g[:, 4:7] expanded over 3
        return y + a.sum(-1, keepdim=True) * m + e


class ComplexRope(nn.Module):
    """Rotary embedding written with complex numbers (Llama's freqs_cis: polar, view_as_complex, a complex multiply,
    view_as_real) and FNet's Fourier mixing (fftn over two axes, its real part)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):  # x [2, 6, 8]
        h = self.fc(x)
        pos = torch.arange(h.shape[1], dtype=torch.float32)
        inv = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.float32) / 8))
        freqs = torch.polar(torch.ones(h.shape[1], 4), torch.outer(pos, inv) * x[0, :, :4].abs().mean())
        z = torch.view_as_complex(h.reshape(2, 6, 4, 2)) * freqs.unsqueeze(0)
        rot = torch.view_as_real(z * 0.5).flatten(2)
        return rot + torch.fft.fftn(h, dim=(1, 2)).real


class WeightStandardized(nn.Module):
    """timm's ScaledStdConv2d (NFNet): the weight standardized by batch norm without running statistics
    (aten._native_batch_norm_legit.no_stats)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        w = F.batch_norm(self.conv.weight.reshape(1, 8, -1), None, None, training=True, momentum=0.0, eps=1e-5)
        return F.conv2d(x, w.reshape_as(self.conv.weight), self.conv.bias, padding=1)


class AttentionRanks(nn.Module):
    """scaled_dot_product_attention over operands not 4-D: [B * heads, N, D] (timm's SAM ViT), [B, windows,
    heads, N, D] (Hiera, NesT) with a mask, and one key/value head broadcast over the query heads without
    enable_gqa (Falcon's multi-query attention)."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x):  # x [2, 3, 8, 16]: batch, windows, tokens, features
        q, k, v = self.qkv(x).chunk(3, -1)
        five = [t.reshape(2, 3, 8, 2, 8).transpose(2, 3) for t in (q, k, v)]  # [2, 3, 2, 8, 8]
        mask = torch.ones(8, 8, dtype=torch.bool).tril()
        a = F.scaled_dot_product_attention(*five, attn_mask=mask)
        three = [t.reshape(12, 8, 8) for t in five]
        b = F.scaled_dot_product_attention(*three, is_causal=True)
        mq = F.scaled_dot_product_attention(five[0].flatten(0, 1), five[1][:, :, :1].flatten(0, 1),
                                            five[2][:, :, :1].flatten(0, 1))
        return a.flatten(0, 2) + b + mq.flatten(0, 1)


class CropsPools(nn.Module):
    """constant_pad_nd with negative pads (crops, RWKV's time shift), an average pool whose window is wider than
    its map with ceil_mode (HF EfficientNet's head) and index_put(accumulate=True) (MoE outputs summed per token)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):  # x [2, 3, 10, 10]
        h = self.conv(x)  # [2, 4, 8, 8]
        cropped = F.pad(h, (-1, 2, 0, -3))
        pooled = F.avg_pool2d(h, 20, ceil_mode=True)
        acc = torch.zeros(6, 8).index_put((torch.tensor([0, 2, 2, 5]),), h[0, 0, :4], accumulate=True)
        return cropped.mean((2, 3)) + pooled.flatten(1) + acc.sum(0).mean()


class IndexPutSliced(nn.Module):
    """index_put with sliced axes before and between the indices (MobileViTv2's and VOLO's x[:, idx] = v): the
    indexed axes adjacent after a slice, apart (values laid out with the index dims first), and accumulating."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):  # x [2, 5, 6]
        h = self.fc(x)
        a = h.clone()
        a[:, torch.tensor([0, 3])] = h[:, :2] * 2
        b = h.clone()
        b[torch.tensor([1, 0]), :, torch.tensor([2, 5])] = h[0, :, :2].T
        d = torch.zeros(2, 5, 6)
        d[:, torch.tensor([1, 3, 4])] += h[:, :3]
        return a + b + d


MODELS = {
    "cnn": (SmallCNN, lambda: (torch.randn(2, 3, 16, 16),), ["--loss", "ce"]),
    "mlp": (MLP, lambda: (torch.randn(4, 16),), []),
    "encoder": (Encoder, lambda: (torch.randn(2, 8, 32),), []),
    "decoder": (Decoder, lambda: (torch.randint(0, 50, (2, 12)),), ["--loss", "ce"]),
    "bn_dropout": (BNDropout, lambda: (torch.randn(4, 2, 8, 8),), []),
    "indexing": (Indexing, lambda: (torch.randn(2, 5, 6),), []),
    "complex_rope": (ComplexRope, lambda: (torch.randn(2, 6, 8),), []),
    "weight_standardized": (WeightStandardized, lambda: (torch.randn(2, 3, 8, 8),), []),
    "attention_ranks": (AttentionRanks, lambda: (torch.randn(2, 3, 8, 16),), []),
    "crops_pools": (CropsPools, lambda: (torch.randn(2, 3, 10, 10),), []),
    "index_put_sliced": (IndexPutSliced, lambda: (torch.randn(2, 5, 6),), []),
}


def ops_of(doc, type_):
    return [o for o in doc["ops"] if o["type"] == type_]


def check_train(tmp, name):
    cls, make, loss = MODELS[name]
    model = cls()
    path = os.path.join(tmp, f"{name}.train.json")
    doc = memplan_torch.export_graph(model, make(), path, train=True)
    assert model.training, "export_graph must restore the model's mode"
    memplan(A.memplan, "analyze", path)
    plan = memplan(A.memplan, "plan", path, "--train", *loss, "--json", json_out=True)
    assert isinstance(plan, dict) and plan, "plan --train printed no JSON object"
    if name in ("cnn", "bn_dropout"):
        bns = ops_of(doc, "BatchNormalization")
        assert bns and all(o["attrs"].get("training_mode") == 1 for o in bns), "batch norm not in training mode"
    if name in ("encoder", "bn_dropout"):
        assert ops_of(doc, "Dropout"), "training dropout lost"
    if name == "decoder":
        att = [o for o in doc["ops"] if o["type"] == "FusedAttention"]
        assert len(att) == 2 and all(o["attrs"]["causal"] == 1 for o in att), "causal SDPA not FusedAttention"
        assert len([o for o in doc["ops"] if o["type"] == "RMSNormalization"]) == 5, "RMSNorm not mapped"
    if name in ("decoder", "mlp"):
        # what PyTorch holds: SiLU saves only its input (one Swish op, no Sigmoid output kept), linear reads W^T
        # as a view (Gemm transB, no transposed copy of a weight saved for the backward)
        assert ops_of(doc, "Swish") and not ops_of(doc, "Sigmoid"), "silu not one Swish op"
        weights = {t["name"] for t in doc["tensors"] if t.get("role") == "weight"}
        assert not [o for o in ops_of(doc, "Transpose") if o["inputs"][0] in weights], "a weight transposed by a copy"
        assert all(o["attrs"].get("transB") == 1 for o in ops_of(doc, "Gemm")) and ops_of(doc, "Gemm"), "linear not Gemm"
    if name == "indexing":
        assert len(ops_of(doc, "Gather")) == 4, "not one Gather per index op (three) and select (one)"


def check_numerics(tmp, name):
    cls, make, _ = MODELS[name]
    torch.manual_seed(1)
    model = cls()
    for m in model.modules():  # non-trivial running statistics for the eval-mode batch norms
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    model.eval()
    inputs = make()
    path = os.path.join(tmp, f"{name}.eval.json")
    memplan_torch.export_graph(model, inputs, path, train=False, weights=True)
    with torch.no_grad():
        want = model(*inputs).numpy()
    cmd = ["run", path]
    for i, x in enumerate(inputs):
        f = os.path.join(tmp, f"{name}.in{i}.npy")
        np.save(f, x.numpy())
        cmd += ["--input", f]
    out = os.path.join(tmp, f"{name}.out.npy")
    memplan(A.memplan, *cmd, "--output", out)
    got = np.load(out)
    assert got.shape == want.shape, f"shape {got.shape} vs PyTorch's {want.shape}"
    err = float(np.max(np.abs(got - want)))
    assert err <= 1e-4 * max(1.0, float(np.max(np.abs(want)))), f"max |memplan - PyTorch| = {err}"


def check_dynamic_batch(tmp):
    path = os.path.join(tmp, "mlp.dyn.json")
    doc = memplan_torch.export_graph(MLP(), (torch.randn(4, 16),), path, dynamic_dims={0: {0: "batch"}})
    x = next(t for t in doc["tensors"] if t["name"] == doc["inputs"][0])
    assert x["shape"] == ["batch", 16], x["shape"]
    small = memplan(A.memplan, "plan", path, "--train", "--dim", "batch=8", "--json", json_out=True)
    large = memplan(A.memplan, "plan", path, "--train", "--dim", "batch=64", "--json", json_out=True)
    assert json.dumps(small) != json.dumps(large), "the bound batch changed nothing"


def check_dynamic_decoder(tmp):
    path = os.path.join(tmp, "decoder.dyn.json")
    doc = memplan_torch.export_graph(Decoder(), (torch.randint(0, 50, (2, 12)),), path,
                                     dynamic_dims={0: {0: "batch"}})
    assert not [o for o in doc["ops"] if o.get("domain") == "memplan"], "declared-shape ops in a symbolic graph"
    memplan(A.memplan, "plan", path, "--train", "--loss", "ce", "--dim", "batch=4")


class Overlapping(nn.Module):
    def forward(self, x):
        return torch.as_strided(x * 2, (3, 3), (1, 1))


def check_as_strided_error(tmp):
    try:
        memplan_torch.export_graph(Overlapping(), (torch.randn(4, 4),), os.path.join(tmp, "o.json"))
    except ValueError as e:
        assert "as_strided" in str(e) and "not a reshape/permute/slice/expand" in str(e), str(e)
        return
    raise AssertionError("overlapping as_strided exported without an error")


class Unmapped(nn.Module):
    def forward(self, x):
        return torch.cumprod(x, 1) + torch.cumprod(x, 0) + torch.cdist(x, x)[:, :4]


def check_unmapped(tmp):
    try:
        memplan_torch.export_graph(Unmapped(), (torch.randn(4, 4),), os.path.join(tmp, "u.json"))
    except memplan_torch.UnmappedOps as e:
        assert e.counts == {"aten.cumprod.default": 2, "aten._cdist_forward.default": 1}, e.counts
        assert "aten.cumprod.default x2" in str(e) and "aten._cdist_forward.default x1" in str(e), str(e)
        assert "pairwise distances" in e.reasons["aten._cdist_forward.default"], e.reasons
        return
    raise AssertionError("no UnmappedOps error")


class Routing(nn.Module):
    """What transformers' MoE layers do before the grouped matmul: sort the expert ids (with ties and values out of
    histc's range), count them per expert, and integer floor division of negative values."""

    def forward(self, x):
        ids = (x * 3).floor().clamp(-4, 6).to(torch.int64).reshape(-1)
        v, _ = torch.sort(ids)
        h = torch.histc(v.float(), bins=5, min=0, max=4)
        fd = torch.div(ids - 2, 3, rounding_mode="floor")
        return torch.cat([v.float(), h, fd.float(), torch.sort(x.reshape(-1), descending=True).values])


def check_routing_numerics(tmp):
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    path = os.path.join(tmp, "routing.json")
    memplan_torch.export_graph(Routing(), (x,), path, train=False, weights=True)
    f, out = os.path.join(tmp, "routing.in.npy"), os.path.join(tmp, "routing.out.npy")
    np.save(f, x.numpy())
    memplan(A.memplan, "run", path, "--input", f, "--output", out)
    want, got = Routing()(x).numpy(), np.load(out)
    assert got.shape == want.shape and np.array_equal(got, want), f"memplan {got} vs PyTorch {want}"


class GroupedExperts(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 8, 16))

    def forward(self, x, offs):
        return torch.ops.transformers.grouped_mm_fallback(x, self.w, offs).sum()


def check_grouped_mm(tmp):
    try:
        import transformers.integrations.moe  # noqa: F401  (registers transformers::grouped_mm_fallback)
    except ImportError:
        return
    import warnings

    path = os.path.join(tmp, "grouped.json")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        doc = memplan_torch.export_graph(GroupedExperts(), (torch.randn(6, 8), torch.tensor([2, 3, 5, 6])), path,
                                         dynamic_dims={0: {0: "rows"}})
    assert any("per-expert splits" in a for a in doc["captured"]["approximated"]), doc["captured"]
    assert any("per-expert splits" in str(x.message) for x in w), [str(x.message) for x in w]
    memplan(A.memplan, "plan", path, "--train", "--dim", "rows=6")


def main():
    r = Results()
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            r.run(f"{name}: exported training graph imports and plans with --train", check_train, tmp, name)
            r.run(f"{name}: memplan run (eval, weights) equals PyTorch's forward", check_numerics, tmp, name)
        r.run("symbolic batch: input dim written as a symbol, bound with --dim", check_dynamic_batch, tmp)
        r.run("symbolic batch: decoder planned through the decomposed attention/RMSNorm", check_dynamic_decoder, tmp)
        r.run("as_strided that is no view: a ValueError naming the node", check_as_strided_error, tmp)
        r.run("unmapped ops: one error listing every op with its count", check_unmapped, tmp)
        r.run("MoE routing: sort, histc and integer floor division equal PyTorch's", check_routing_numerics, tmp)
        r.run("grouped_mm_fallback: planned as one matmul, with a warning", check_grouped_mm, tmp)
    return r.finish()


if __name__ == "__main__":
    sys.exit(main())
