"""Temporaries CUDA kernels take from the caching allocator inside one op, which fake tensors never show.

TensorIterator reductions (sum, mean, amax, norms, ...): when the work per output is large and the outputs few,
PyTorch's reduction kernel splits each output across thread blocks and takes a global staging buffer and a
semaphore array for the step between them (aten/src/ATen/native/cuda/Reduce.cuh: setReduceConfig,
ReduceConfig::global_memory_size). The launch configuration is recomputed here from the input's shape and strides
and the GPU's multiprocessors; the buffer is (accumulator bytes) x outputs x blocks per output, times the block's
width and vector size when the block's threads hold different outputs. Checked on the H200 against
torch.cuda.max_memory_allocated (bench/zoo_optrace.py: a 1024 x 8000 bias-gradient sum takes 62.5 MiB).
"""
MAX_THREADS = 512
WARP = 32
INPUT_VEC = 4
VT0 = 4

# ATen reductions through gpu_reduce_kernel and the bytes of their accumulator (arg_t) per input dtype size
_ACC_BYTES = {"sum": None, "mean": None, "prod": None, "amax": None, "amin": None, "norm": None,
              "linalg_vector_norm": None, "nansum": None, "logsumexp": None,
              "argmax": 16, "argmin": 16, "max": 16, "min": 16, "var": 24, "std": 24, "var_mean": 24,
              "std_mean": 24, "any": 1, "all": 1}


def _last_pow2(n):
    p = 1
    while p * 2 <= n:
        p *= 2
    return max(1, p)


def _div_up(a, b):
    return -(-a // b)


def reduction_dims(name, args, kwargs):
    """The reduced dims of a reduction call, or None when the call reduces nothing (or is no reduction)."""
    x = args[0]
    dims = kwargs.get("dim", args[1] if len(args) > 1 and not isinstance(args[1], bool) else None)
    if name in ("norm",):
        dims = kwargs.get("dim", args[2] if len(args) > 2 else None)
    if name == "linalg_vector_norm":
        dims = kwargs.get("dim", args[2] if len(args) > 2 else None)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(x.dim()))
    if isinstance(dims, int):
        dims = [dims]
    if not all(isinstance(d, int) for d in dims):
        return None
    return sorted({d % max(x.dim(), 1) for d in dims})


def reduction_staging_bytes(name, x, dims, num_sms, max_threads_per_sm):
    """Bytes of the global staging buffer and of the semaphores one CUDA reduction takes (0, 0 when none)."""
    if name not in _ACC_BYTES or x.dim() == 0 or x.numel() == 0:
        return 0, 0
    elem = x.element_size()
    acc = _ACC_BYTES[name] or (8 if elem == 8 else 4)
    # the iterator's dims: reduced dims first, each group by ascending input stride, coalesced where contiguous
    shape, strides = list(x.shape), [s * elem for s in x.stride()]
    red = [(strides[d], shape[d]) for d in dims if shape[d] != 1]
    keep = [(strides[d], shape[d]) for d in range(x.dim()) if d not in dims and shape[d] != 1]
    red.sort()
    keep.sort()

    def coalesce(group):
        out = []
        for st, n in group:
            if out and out[-1][0] * out[-1][1] == st:
                out[-1] = (out[-1][0], out[-1][1] * n)
            else:
                out.append((st, n))
        return out

    red, keep = coalesce(red), coalesce(keep)
    num_outputs = 1
    for _, n in keep:
        num_outputs *= n
    inputs_per_output = x.numel() // max(num_outputs, 1)
    if inputs_per_output <= 1:
        return 0, 0
    ndim = len(red) + len(keep)
    fastest = not keep or (red and red[0][0] < keep[0][0])
    if fastest:
        dim0, dim1, moving = inputs_per_output, num_outputs, red[0][0]
    else:
        dim0, dim1, moving = num_outputs, inputs_per_output, keep[0][0]
    out_vec = 1
    if moving == elem:
        if fastest and dim0 > 128 and len(red) == 1 and VT0 >= INPUT_VEC:
            dim0 //= INPUT_VEC
        elif not fastest:
            out_vec = 4
            while keep[0][1] % out_vec:
                out_vec //= 2
            dim0 //= out_vec
    # set_block_dimension
    max_threads = MAX_THREADS // out_vec
    d0 = _last_pow2(dim0) if dim0 < max_threads else max_threads
    d1 = _last_pow2(dim1) if dim1 < max_threads else max_threads
    bw = min(d0, WARP)
    bh = min(d1, max_threads // bw)
    bw = min(d0, max_threads // bh)
    num_threads = bw * bh
    step_in = step_out = 1
    block_x_reduce = False
    if ndim == 0 or fastest:
        step_in *= bw
        block_x_reduce = True
    else:
        step_out *= bw
    block_y_reduce = False
    if _div_up(inputs_per_output, step_in) >= bh * 16 or _div_up(inputs_per_output, step_in) >= 256:
        step_in *= bh
        block_y_reduce = True
    else:
        step_out *= bh
    target_grid = num_sms * (max_threads_per_sm // num_threads)
    grid_x = _div_up(num_outputs // out_vec, step_out)
    values_per_thread = _div_up(inputs_per_output, step_in)
    if not (block_y_reduce and values_per_thread >= 256 and grid_x <= target_grid):
        return 0, 0
    ctas = max(min(_div_up(target_grid, grid_x), _div_up(values_per_thread, 16)), _div_up(values_per_thread, 256))
    if ctas <= 1:
        return 0, 0
    size = acc * num_outputs * ctas
    if not block_x_reduce:
        size *= bw * out_vec
    return size, 4 * grid_x
