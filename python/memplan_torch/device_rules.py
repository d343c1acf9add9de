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


# cuDNN convolution workspaces (cuDNN 9.19, PyTorch 2.11, benchmark mode off, TF32 off; measured on an H100, sm_90,
# bench/gpu_rules_probe.py --only conv and bench/zoo_conv_probe.py; docs/torch.md "Device rules"). With benchmark
# off PyTorch runs the first engine of cuDNN's heuristic list that executes and allocates that plan's workspace
# through the caching allocator inside the op, every call. memplan's eager model (plan --train) runs the same rule
# ported to C++ (planner/pytorch/cudnn_conv.cpp; tests/python/test_estimate_conv_rule.py holds the two equal).
# The engines' workspaces fall in a few families:
FP32_SMALL_FFT_BYTES_PER_FILTER = 2484   # fp32 forward, outputs of at most 8x8: a frequency-domain filter bank
FP32_WGRAD_ACTIVATION_FACTOR = 2.25      # fp32 weight gradient, k x k stride 1: x (input + grad_output) + ...
FP32_WGRAD_WEIGHT_FACTOR = 3.85          # ... + this x the weight
LOW_WGRAD_1X1_PARTIALS = 8               # bf16/fp16 1x1 weight gradient: this many fp32 split-K partial sums
FP32_DGRAD_FFT_TILE_BYTES = 32 * 17 * 8  # fp32 input gradient, FFT over 32x32 tiles: one complex half-spectrum


def conv_memory_format(x, w):
    """The layout PyTorch runs a cuDNN convolution in (cudnn_conv_suggest_memory_format): channels-last when the
    input or the weight is laid out channels-last, else contiguous."""
    import torch

    if x.dim() not in (4, 5):
        return torch.contiguous_format
    cl = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
    for t in (x, w):
        if not t.is_contiguous() and t.is_contiguous(memory_format=cl):
            return cl
    return torch.contiguous_format


def conv_backend(x, w, transposed, groups):
    """"depthwise" where PyTorch runs its own depthwise kernels (no workspace), else "cudnn" (ConvUtils.h:
    cuDNN takes depthwise convolutions only in channels-last or fp16)."""
    import torch

    dims = x.dim()
    depthwise = (not transposed and dims in (3, 4) and x.shape[1] == groups and w.shape[0] % max(groups, 1) == 0
                 and groups > 1)
    if depthwise and x.dtype != torch.float16 and conv_memory_format(x, w) == torch.contiguous_format:
        return "depthwise"
    return "cudnn"


def conv_workspace_bytes(x, w, y, stride, dilation, groups, pass_):
    """The workspace cuDNN's heuristic engine takes for one pass ("forward", "backward_data", "backward_filter") of
    a convolution with input x, weight w and output y (the pass's operands as PyTorch hands them to cuDNN, in the
    layout conv_memory_format gives). Fitted to measurements; 0 where the engine needs none."""
    import torch

    xb, wb, yb = (t.numel() * t.element_size() for t in (x, w, y))
    spatial = list(w.shape[2:])
    one_by_one = all(k == 1 for k in spatial) and all(s == 1 for s in stride)
    channels_last = conv_memory_format(x, w) != torch.contiguous_format
    cin, cout = x.shape[1], w.shape[0]
    if x.dtype in (torch.bfloat16, torch.float16):
        # tensor-core engines run channels-last: a contiguous (NCHW) convolution transforms its operands into the
        # workspace, except a 1x1 stride-1 one (a plain GEMM), whose weight gradient splits its reduction
        if channels_last:
            return 0
        if one_by_one:  # the partial sums, at most the size of the operands
            return min(LOW_WGRAD_1X1_PARTIALS * 4 * cin * cout // groups, xb + yb) if pass_ == "backward_filter" else 0
        return xb + yb + wb
    if x.dtype != torch.float32:
        return 0
    # fp32 with TF32 off: CUDA-core engines, native NCHW; a channels-last convolution is transformed to NCHW
    # (its weight gradient excepted)
    if channels_last:
        return 0 if pass_ == "backward_filter" else xb + yb + wb
    square3 = spatial == [3, 3] and all(s == 1 for s in stride) and all(d == 1 for d in dilation) and groups == 1
    if pass_ == "forward":
        out_area = 1
        for v in y.shape[2:]:
            out_area *= v
        if square3 and out_area <= 64 and 76 <= cin <= 160 and cout >= 76:
            return FP32_SMALL_FFT_BYTES_PER_FILTER * cin * cout
        return 0
    area = 1
    for v in x.shape[2:]:
        area *= v
    if pass_ == "backward_filter":
        if (spatial == [3, 3] and all(s == 1 for s in stride) and all(d == 1 for d in dilation)
                and cin // groups >= 32 and (cin >= 64 or area <= 56 * 56)):
            return int(FP32_WGRAD_ACTIVATION_FACTOR * (xb + yb) + FP32_WGRAD_WEIGHT_FACTOR * wb)
        return 0
    # input gradient: FFT tiling (the filters' spectra and two tiles of spectra per image and channel) for mid-size
    # maps of at least 64 channels each side
    if square3 and x.dim() == 4 and all(40 <= v <= 80 for v in x.shape[2:]) and min(cin, cout) >= 64:
        return FP32_DGRAD_FFT_TILE_BYTES * (cin * cout + 2 * x.shape[0] * (cin + cout))
    return 0
