#!/usr/bin/env python3
"""memplan_torch.export_graph records how PyTorch eager calls scaled_dot_product_attention where torch.export's
trace calls it otherwise (transformers repeats grouped-query kv heads and builds a mask while tracing, eager passes
enable_gqa and is_causal): FusedAttention's pytorch_kv_heads / pytorch_mask, from which `memplan plan`'s
pytorch_peak_bytes picks the CUDA kernel (fp32 grouped-query heads: the math backend, its [B, H, S, S]
probabilities saved). Exit 77 without torch."""
import json
import os
import sys
import tempfile

from torch_testlib import Results, args, memplan, need_torch

A = args()
need_torch()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import memplan_torch  # noqa: E402

B, S, D, HQ, HKV, LAYERS, VOCAB = 2, 64, 64, 8, 2, 2, 40


class TracedOtherwise(nn.Module):
    """A grouped-query decoder whose attention call differs under torch.export, as transformers' does."""

    def __init__(self):
        super().__init__()
        self.emb, self.head = nn.Embedding(VOCAB, D), nn.Linear(D, VOCAB, bias=False)
        self.q = nn.ModuleList(nn.Linear(D, D, bias=False) for _ in range(LAYERS))
        self.kv = nn.ModuleList(nn.Linear(D, 2 * HKV * (D // HQ), bias=False) for _ in range(LAYERS))

    def forward(self, ids):
        x = self.emb(ids)
        dh = D // HQ
        for q_proj, kv_proj in zip(self.q, self.kv):
            q = q_proj(x).view(B, S, HQ, dh).transpose(1, 2)
            k, v = kv_proj(x).view(B, S, 2, HKV, dh).permute(2, 0, 3, 1, 4).unbind(0)
            if torch.compiler.is_exporting():
                k, v = (t.repeat_interleave(HQ // HKV, 1) for t in (k, v))
                mask = torch.ones(S, S, dtype=torch.bool).tril().expand(B, 1, S, S)
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1 if self.training else 0.0)
            else:
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True,
                                                   dropout_p=0.1 if self.training else 0.0)
            x = x + a.transpose(1, 2).reshape(B, S, D)
        return self.head(x)


def peak(path):
    return memplan(A.memplan, "plan", path, "--train", "--loss", "ce", "--json", json_out=True)["pytorch_peak_bytes"]


def check_eager_attrs(tmp):
    path = os.path.join(tmp, "gqa.json")
    doc = memplan_torch.export_graph(TracedOtherwise(), (torch.randint(0, VOCAB, (B, S)),), path, train=True)
    att = [o for o in doc["ops"] if o["type"] == "FusedAttention"]
    assert len(att) == LAYERS, f"{len(att)} FusedAttention ops"
    for o in att:
        assert o["attrs"].get("pytorch_kv_heads") == HKV and o["attrs"].get("pytorch_mask") == 0, o["attrs"]
    # Without the eager call's facts the traced call (equal heads, a mask) reads as the efficient kernel: the
    # prediction loses the math backend's saved probabilities, dropout output and mask per layer.
    stripped = json.loads(json.dumps(doc))
    for o in stripped["ops"]:
        for k in ("pytorch_kv_heads", "pytorch_mask"):
            o.get("attrs", {}).pop(k, None)
    other = os.path.join(tmp, "gqa.traced.json")
    with open(other, "w") as f:
        json.dump(stripped, f)
    with_eager, traced = peak(path), peak(other)
    saved = LAYERS * B * HQ * S * S * (4 + 4 + 1)
    assert with_eager >= traced + saved, f"pytorch_peak_bytes {with_eager} vs {traced} (+{saved} expected)"


def main():
    r = Results()
    with tempfile.TemporaryDirectory() as tmp:
        r.run("eager SDPA facts on FusedAttention; fp32 grouped-query heads predicted on the math backend",
              check_eager_attrs, tmp)
    return r.finish()


if __name__ == "__main__":
    sys.exit(main())
