"""What a named GPU decides that fake tensors cannot: which scaled-dot-product-attention kernel runs, the cuBLAS
workspaces, the cuDNN RNN reserve. docs/torch.md ("Device rules") states each rule and where it was measured."""
from dataclasses import dataclass

MIB = 1 << 20


@dataclass(frozen=True)
class GpuRules:
    name: str
    sm: tuple  # compute capability (major, minor)
    # The workspace PyTorch's cuBLAS handle takes through the caching allocator, once per (thread, stream), on the
    # first GEMM of that thread: the forward runs on the caller's thread, the backward on autograd's device thread.
    cublas_workspace_bytes: int
    multiprocessors: int = 132        # the reduction kernel sizes its grid by these two
    max_threads_per_multiprocessor: int = 2048


GPUS = {
    # H100 and H200 (sm_90), PyTorch 2.11 (CUDA 13): the first GEMM of a thread takes 32 MiB (measured,
    # bench/gpu_rules_probe.py; CUBLAS_WORKSPACE_CONFIG's Hopper default :4096:8).
    "h100": GpuRules("h100", (9, 0), 32 * MIB),
    "h200": GpuRules("h200", (9, 0), 32 * MIB),
}


def cudnn_sdpa_preferred(rules):
    """SDPA tries cuDNN attention first on sm_90 / sm_100 / sm_103 when the cuDNN that PyTorch loads is newer than
    9.15 (sdp_utils.cpp, check_prefer_cudnn_attention) unless TORCH_CUDNN_SDPA_DEPRIORITIZED is set."""
    import os

    import torch

    if os.environ.get("TORCH_CUDNN_SDPA_DEPRIORITIZED", "0") not in ("0", "", "false", "False"):
        return False
    try:
        version = torch.backends.cudnn.version() or 0
    except Exception:  # noqa: BLE001 - a PyTorch without cuDNN
        version = 0
    return version > 91500 and rules.sm in ((9, 0), (10, 0), (10, 3))


def gpu_rules(gpu):
    if isinstance(gpu, GpuRules):
        return gpu
    key = str(gpu).lower()
    if key not in GPUS:
        raise ValueError(f"unknown gpu {gpu!r}: one of {', '.join(sorted(GPUS))}")
    return GPUS[key]


def sdpa_backend(rules, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, enable_gqa=False):
    """The kernel PyTorch's CUDA SDPA dispatch picks (select_sdp_backend in sdp_utils.cpp): the first of
    [cudnn,] flash, efficient, math whose constraints the inputs meet."""
    import torch

    half = q.dtype in (torch.float16, torch.bfloat16)
    same_dtype = q.dtype == k.dtype == v.dtype
    dense4 = q.dim() == 4 and k.dim() == 4 and v.dim() == 4
    if not dense4 or not same_dtype or min(q.shape[-2], k.shape[-2]) == 0:
        return "math"
    stride1 = all(t.stride(-1) == 1 for t in (q, k, v))
    b_ok = q.shape[0] == k.shape[0] == v.shape[0]
    hq, hk, hv = q.shape[1], k.shape[1], v.shape[1]
    heads_equal = hq == hk == hv
    gqa_ok = enable_gqa and hk == hv and hk > 0 and hq % hk == 0
    dq, dk, dv = q.shape[-1], k.shape[-1], v.shape[-1]
    order = (["cudnn"] if cudnn_sdpa_preferred(rules) else []) + ["flash", "efficient"]
    for backend in order:
        if backend == "cudnn":
            # measured on the H200 with cuDNN 9.19 (bench/gpu_rules_probe.py): every bf16 case of the grid (head
            # sizes 32-256, boolean and float masks, causal, grouped heads, dropout, both layouts) ran cuDNN
            # a mask that needs a gradient goes to the efficient kernel (the only one that returns the bias's
            # gradient; measured: a learned per-head mask in bf16 ran memory-efficient attention)
            if half and b_ok and (heads_equal or gqa_ok) and not (attn_mask is not None and attn_mask.requires_grad):
                return "cudnn"
        elif backend == "flash":
            if (half and attn_mask is None and dq == dk == dv and dq <= 256 and rules.sm >= (8, 0) and b_ok
                    and (heads_equal or gqa_ok) and not (is_causal and q.shape[-2] != k.shape[-2])
                    and all(t.stride(-1) == 1 or t.shape[-1] == 1 for t in (q, k, v))):
                return "flash"
        elif backend == "efficient":
            align = 8 if half else 4
            if (dq == dk and dq % align == 0 and dv % align == 0 and b_ok and heads_equal and stride1
                    and q.dtype in (torch.float16, torch.bfloat16, torch.float32)):
                return "efficient"
    return "math"
