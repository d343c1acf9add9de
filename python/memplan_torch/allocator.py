"""memplan's planned-arena CUDA allocator for PyTorch: install it, mark steps, read its statistics and trace."""
import contextlib
import json

from . import _lib
from ._lib import MemplanTorchError

_state = {"handle": None, "path": None, "allocator": None}


def _handle():
    h = _state["handle"]
    if h is None:
        raise MemplanTorchError("memplan's allocator is not installed: call memplan_torch.use_planned_allocator() first")
    return h


def use_planned_allocator(record_steps=2, lib=None, replan_after_miss_steps=2):
    """Makes memplan's allocator PyTorch's CUDA allocator. Call it before anything allocates CUDA memory.

    The first `record_steps` steps (marked with step() or step_begin()/step_end()) are recorded and the last one
    planned; later steps are served from one arena at the planned offsets. With 2 (the default) the first step
    makes what lives for the whole run (optimizer state) and the second frees the first's gradients, which tells
    when the next step frees each gradient: gradients are then planned in the arena too (periodic blocks);
    with 1 they are served by the pool. A step that departs from the plan (a
    changed shape, a short last batch) is served by memplan's pool and counted; `replan_after_miss_steps`
    such steps in a row trigger a re-plan. Returns the library's path.
    """
    import torch

    if _state["handle"] is not None:
        if lib is None or _lib.find_library(lib) == _state["path"]:
            return _state["path"]
        raise MemplanTorchError(f"memplan's allocator is already installed from {_state['path']}")
    if record_steps < 1:
        raise MemplanTorchError(f"record_steps must be at least 1, got {record_steps}")
    if not torch.cuda.is_available():
        raise MemplanTorchError("use_planned_allocator needs a CUDA device; torch.cuda.is_available() is False")
    if torch.cuda.is_initialized() or torch.cuda.memory_allocated() > 0:
        raise MemplanTorchError(
            "use_planned_allocator() must be called before any CUDA allocation: CUDA is already initialized "
            "in this process (PyTorch's own allocator is in use and cannot be swapped). Call it first thing, "
            "before creating CUDA tensors or moving a model to the GPU")
    path = _lib.find_library(lib)
    h = _lib.load(path)
    if h.memplan_configure(int(record_steps), int(replan_after_miss_steps)) != 0:
        raise MemplanTorchError(f"memplan_configure failed: {_lib.last_error(h)}")
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "memplan_malloc", "memplan_free")
    try:
        torch.cuda.memory.change_current_allocator(alloc)
    except RuntimeError as e:  # PyTorch refuses once its allocator has served an allocation
        raise MemplanTorchError(f"PyTorch refused to swap its CUDA allocator ({e}); call use_planned_allocator() "
                                "before any CUDA allocation") from e
    _state.update(handle=h, path=path, allocator=alloc)
    return path


def is_installed():
    return _state["handle"] is not None


def step_begin():
    """Marks the start of a training step (the allocations until step_end() are one step)."""
    _handle().memplan_step_begin()


def step_end():
    """Marks the end of a training step."""
    _handle().memplan_step_end()


@contextlib.contextmanager
def step():
    """`with memplan_torch.step(): ...` marks one training step."""
    step_begin()
    try:
        yield
    finally:
        step_end()


def stats(device=None):
    """The allocator's statistics as a dict: the library's settings (record_steps, replan_after_miss_steps), every
    device's counters under "devices", and those of `device` (default: the first device in use) at the top level
    (arena_bytes, pool_bytes, device_bytes, peak_device_bytes, hits, misses, replans, steps, ...:
    docs/torch-allocator.md)."""
    h = _handle()
    need = h.memplan_stats_json(None, 0)
    buf = _lib.ctypes.create_string_buffer(need + 1)
    got = h.memplan_stats_json(buf, need + 1)
    if got > need:  # grew in between (another thread allocated): once more with the new size
        buf = _lib.ctypes.create_string_buffer(got + 1)
        h.memplan_stats_json(buf, got + 1)
    s = json.loads(buf.value.decode("utf-8"))
    devices = s.get("devices", [])
    mine = [d for d in devices if device is None or d.get("device") == device]
    if mine:
        s.update(mine[0])
    return s


def save_trace(path):
    """Writes the recorded step as a memplan trace (`memplan viz --trace PATH` draws it)."""
    h = _handle()
    if h.memplan_save_trace(str(path).encode("utf-8")) != 0:
        raise MemplanTorchError(f"memplan_save_trace('{path}') failed: {_lib.last_error(h)}")


def reserved_bytes(s=None):
    """The most memplan's allocator took from the device at once (arena, pool chunks and exact allocations:
    peak_device_bytes of stats(), recording steps included)."""
    s = stats() if s is None else s
    return int(s["peak_device_bytes"])
