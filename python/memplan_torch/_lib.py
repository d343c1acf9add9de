"""Finding and loading libmemplan_torch.so through ctypes (the C API of runtime_allocator's PyTorch allocator)."""
import ctypes
import os

LIB_NAME = "libmemplan_torch.so"
_HERE = os.path.dirname(os.path.abspath(__file__))


class MemplanTorchError(RuntimeError):
    """An error from memplan_torch or from libmemplan_torch.so (its memplan_last_error text)."""


class UnmappedOps(ValueError):
    """Raised when the graph holds ATen ops memplan has no mapping for (or refuses, with `reasons`); `counts` maps
    each to its count."""

    def __init__(self, counts, reasons=None):
        self.counts = dict(sorted(counts.items()))
        self.reasons = dict(sorted((reasons or {}).items()))  # refused ops (aten_ops.REFUSED): why
        lines = ", ".join(f"{k} x{v}" for k, v in self.counts.items())
        why = "".join(f"; {k}: {r}" for k, r in self.reasons.items())
        super().__init__(f"{len(self.counts)} ATen op(s) have no memplan mapping: {lines}{why}")


def candidate_paths(lib=None):
    """Where the library is looked for, in order: `lib`, $MEMPLAN_TORCH_LIB, next to this package, the build dir."""
    if lib:
        return [os.path.abspath(lib)]
    out = []
    env = os.environ.get("MEMPLAN_TORCH_LIB")
    if env:
        out.append(os.path.abspath(env))
    out.append(os.path.join(_HERE, LIB_NAME))
    repo = os.path.dirname(os.path.dirname(_HERE))  # python/memplan_torch -> repository root
    out.append(os.path.join(repo, "build", LIB_NAME))
    out.append(os.path.join(os.getcwd(), "build", LIB_NAME))
    return out


def find_library(lib=None):
    paths = candidate_paths(lib)
    for p in paths:
        if os.path.isfile(p):
            return p
    raise MemplanTorchError(
        f"{LIB_NAME} not found; looked at: {', '.join(paths)}. Build memplan with the CUDA toolkit "
        f"(cmake --build build --target memplan_torch) or set MEMPLAN_TORCH_LIB to its path")


def load(path):
    """The library as a ctypes handle with the C API's signatures declared."""
    # RTLD_GLOBAL and the same path: torch's CUDAPluggableAllocator dlopens the same file and gets this handle.
    h = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    h.memplan_configure.argtypes = [ctypes.c_int, ctypes.c_int]
    h.memplan_configure.restype = ctypes.c_int
    h.memplan_step_begin.argtypes = []
    h.memplan_step_begin.restype = None
    h.memplan_step_end.argtypes = []
    h.memplan_step_end.restype = None
    h.memplan_stats_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    h.memplan_stats_json.restype = ctypes.c_size_t
    h.memplan_save_trace.argtypes = [ctypes.c_char_p]
    h.memplan_save_trace.restype = ctypes.c_int
    h.memplan_last_error.argtypes = []
    h.memplan_last_error.restype = ctypes.c_char_p
    for sym in ("memplan_malloc", "memplan_free"):
        if not hasattr(h, sym):
            raise MemplanTorchError(f"{path} does not export {sym}: not a memplan PyTorch allocator")
    return h


def last_error(h):
    msg = h.memplan_last_error()
    return msg.decode("utf-8", "replace") if msg else "unknown error"
