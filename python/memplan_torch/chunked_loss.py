"""A language model's head and cross-entropy computed over chunks of tokens: the full logits and their gradient
never exist at once.

The peak of a decoder's training step is usually its last two ops: the head's logits (tokens x vocabulary, in the
autocast dtype), cross-entropy's float32 copy and log-softmax of them, and in the backward their gradients of the same
size (8 x 1024 tokens x 32000 x 4 bytes = 1 GiB each). `linear_cross_entropy(hidden, weight, labels, bias=...)`
returns the same loss as `F.cross_entropy(F.linear(hidden, weight, bias), labels)` but runs the head chunk by chunk
of `chunk_tokens` tokens: each chunk's logits, their log-sum-exp, the loss and the chunk's gradients (with respect to
the hidden states, the weight and the bias) are computed in the forward, so that only the gradients (hidden-sized
and weight-sized) and a chunk's logits are ever held. The backward scales the stored gradients by the incoming one.
Under torch.autocast the chunk's matmuls run in the autocast dtype (as F.linear would) and the softmax in float32 (as
F.cross_entropy does); the weight's and bias's gradients are accumulated in their own dtype's float32.

`lm_head_loss(head, hidden, labels)` takes an nn.Linear head (a model's `lm_head`, `get_output_embeddings()`) and
hidden states of any leading shape. Both accept `ignore_index` and `reduction` ("mean" over the tokens not ignored,
or "sum") as F.cross_entropy does.
"""
import torch

DEFAULT_CHUNK_BYTES = 256 * 2 ** 20  # one chunk's float32 logits


def default_chunk_tokens(tokens, vocab, chunk_bytes=DEFAULT_CHUNK_BYTES):
    """Tokens per chunk so that one chunk's float32 logits take at most `chunk_bytes` (at least one token)."""
    return max(1, min(int(tokens), int(chunk_bytes) // max(1, 4 * int(vocab))))


def _compute_dtype(hidden, weight):
    """The dtype F.linear would compute the logits in: autocast's for the device when it is on, else promotion's."""
    dev = hidden.device.type
    if torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return torch.promote_types(hidden.dtype, weight.dtype)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, chunk, ignore_index, reduction):
        n = hidden.shape[0]
        low = _compute_dtype(hidden, weight)
        want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        want_b = bias is not None and ctx.needs_input_grad[2]
        grad_h = torch.empty_like(hidden) if want_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if want_w else None
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if want_b else None
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        with torch.autocast(hidden.device.type, enabled=False):
            w = weight.to(low)  # once, as autocast caches a weight's cast
            b = bias.to(low) if bias is not None else None
            for start in range(0, n, chunk):
                h = hidden[start:start + chunk].to(low)
                y = labels[start:start + chunk]
                z = torch.nn.functional.linear(h, w, b).float()  # cross-entropy's float32 logits of the chunk
                lse = torch.logsumexp(z, dim=-1)
                keep = y != ignore_index
                safe = torch.where(keep, y, torch.zeros_like(y))
                total += torch.where(keep, lse - z.gather(1, safe.unsqueeze(1)).squeeze(1), torch.zeros_like(lse)).sum()
                if not (want_h or want_w or want_b):
                    continue
                # d loss / d logits (before the mean's scale): softmax - onehot, zero where ignored; in place in z.
                z.sub_(lse.unsqueeze(1)).exp_()
                z.scatter_add_(1, safe.unsqueeze(1), -keep.to(z.dtype).unsqueeze(1))
                z.mul_(keep.to(z.dtype).unsqueeze(1))
                g = z.to(low)  # the logits' dtype, as cross-entropy's gradient reaches the head
                del z
                if want_h:
                    grad_h[start:start + chunk] = g @ w
                if want_w:
                    grad_w.add_(g.t() @ h)
                if want_b:
                    grad_b.add_(g.sum(0, dtype=torch.float32))
        if reduction == "mean":
            scale = 1.0 / (labels != ignore_index).sum().clamp_min(1).to(torch.float32)
            total = total * scale
            for t in (grad_h, grad_w, grad_b):
                if t is not None:
                    t.mul_(scale.to(t.dtype))
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        ctx.dtypes = (weight.dtype, bias.dtype if bias is not None else None)
        ctx.used = False
        return total

    @staticmethod
    def backward(ctx, grad_out):
        # The gradients were computed in the forward; they are scaled in place (no second copy of the weight's) and
        # handed on, so a second backward through the same loss would scale them twice: refused.
        if ctx.used:
            raise RuntimeError("linear_cross_entropy: a second backward through the same loss (its gradients were "
                               "computed in the forward and handed on once)")
        ctx.used = True
        grad_h, grad_w, grad_b = ctx.saved_tensors
        w_dtype, b_dtype = ctx.dtypes
        out = []
        for t, dtype in ((grad_h, None), (grad_w, w_dtype), (grad_b, b_dtype)):
            if t is None:
                out.append(None)
                continue
            t = t.mul_(grad_out.to(t.dtype))
            out.append(t if dtype is None or t.dtype == dtype else t.to(dtype))
        return out[0], out[1], out[2], None, None, None, None


def linear_cross_entropy(hidden, weight, labels, bias=None, *, chunk_tokens=None, ignore_index=-100, reduction="mean"):
    """F.cross_entropy(F.linear(hidden, weight, bias), labels) over chunks of tokens (module docstring).
    `hidden` [..., H], `weight` [V, H], `labels` [...] (the hidden states' leading shape)."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"hidden {tuple(hidden.shape)} and weight {tuple(weight.shape)}: weight must be [vocab, "
                         f"{hidden.shape[-1]}]")
    if tuple(labels.shape) != tuple(hidden.shape[:-1]):
        raise ValueError(f"labels {tuple(labels.shape)} must have the hidden states' leading shape {tuple(hidden.shape[:-1])}")
    h = hidden.reshape(-1, hidden.shape[-1])
    y = labels.reshape(-1)
    chunk = int(chunk_tokens) if chunk_tokens else default_chunk_tokens(h.shape[0], weight.shape[0])
    if chunk < 1:
        raise ValueError(f"chunk_tokens must be at least 1, got {chunk_tokens!r}")
    return _LinearCrossEntropy.apply(h, weight, bias, y, chunk, int(ignore_index), reduction)


def lm_head_loss(head, hidden, labels, **kw):
    """linear_cross_entropy through an nn.Linear head (its weight and bias)."""
    return linear_cross_entropy(hidden, head.weight, labels, head.bias, **kw)
