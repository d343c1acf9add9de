"""One rank of a data-parallel step in estimate_step: DDP, DDP with ZeroRedundancyOptimizer (ZeRO-1) and FSDP2.

What runs on fake tensors runs as PyTorch's own code on a fake process group: FSDP2's `fully_shard` (its sharded
parameters, the all-gather and reduce-scatter buffers it allocates and frees around each block, its mixed-precision
casts) and ZeroRedundancyOptimizer (its partition of the parameters across ranks, so each rank's optimizer state and
step() temporaries). DDP's reducer is C++ that reads real memory, so its one allocation is added as the reducer
makes it: a flat gradient bucket per bucket of parameters (PyTorch's own bucket assignment), allocated at
construction and kept; gradients are copied into the buckets (gradient_as_bucket_view=False, DDP's default), or are
views of them (True: autograd's gradient dies once copied in). Collectives run in place on these buffers.
"""
import inspect
from contextlib import contextmanager

LAYOUTS = ("ddp", "zero1", "fsdp2")


class DataParallel:
    """A data-parallel layout for estimate_step(parallel=...).

    layout: "ddp" (DistributedDataParallel), "zero1" (DDP with ZeroRedundancyOptimizer over the optimizer's class and
    defaults) or "fsdp2" (`fully_shard` on each module of `shard` or, by default, of the model's largest
    nn.ModuleList, then on the root). world_size: ranks; rank: the rank estimated (None: every rank whose memory can
    differ, see `roles`). With estimate_step(autocast_dtype=bf16), FSDP2 computes in bf16 through
    MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=float32) without autocast, as its documentation recommends;
    DDP and ZeRO-1 keep torch.autocast."""

    def __init__(self, layout, world_size, rank=None, *, bucket_cap_mb=25, gradient_as_bucket_view=False, shard=None,
                 reshard_after_forward=True):
        if layout not in LAYOUTS:
            raise ValueError(f"parallel layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a positive integer, not {world_size!r}")
        if rank is not None and not (isinstance(rank, int) and 0 <= rank < world_size):
            raise ValueError(f"rank must be in [0, {world_size}), not {rank!r}")
        if bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb must be positive, not {bucket_cap_mb!r}")
        self.layout, self.world_size, self.rank = layout, world_size, rank
        self.bucket_cap_mb, self.gradient_as_bucket_view = bucket_cap_mb, gradient_as_bucket_view
        self.shard, self.reshard_after_forward = shard, reshard_after_forward

    def roles(self):
        """The ranks estimated: the one asked for, else every rank for ZeRO-1 (each owns another part of the
        optimizer state), else rank 0 (DDP and FSDP2 allocate the same on every rank: FSDP2 pads every shard to
        the first one's size)."""
        if self.rank is not None:
            return [self.rank]
        return list(range(self.world_size)) if self.layout == "zero1" else [0]

    def describe(self):
        return {"layout": self.layout, "world_size": self.world_size, "bucket_cap_mb": self.bucket_cap_mb,
                "gradient_as_bucket_view": self.gradient_as_bucket_view}


def as_data_parallel(parallel):
    if parallel is None or isinstance(parallel, DataParallel):
        return parallel
    if isinstance(parallel, dict):
        return DataParallel(**parallel)
    raise ValueError("parallel must be a memplan_torch.DataParallel or a dict of its arguments")


@contextmanager
def fake_process_group(world_size, rank):
    """A process group of `world_size` fake ranks seen from `rank` (collectives do nothing) and a CPU device mesh
    over it, for the duration; refuses to replace a real process group."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("estimate_step(parallel=...) runs on a fake process group: call it where no process "
                           "group is initialized (before init_process_group, or in a separate process)")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield init_device_mesh("cpu", (world_size,))
    finally:
        dist.destroy_process_group()


def local(t):
    """The tensor holding a rank's memory: a DTensor's local shard, else the tensor."""
    return getattr(t, "_local_tensor", t)


def ddp_buckets(trained, par):
    """The flat gradient buckets DDP's reducer allocates at construction: PyTorch's own assignment of the
    parameters (in reverse registration order, the first bucket capped at DDP's first-bucket size), one tensor of
    the parameters' dtype per bucket."""
    import torch
    import torch.distributed as dist

    params = list(reversed(trained))
    if not params:
        return []
    cap = int(par.bucket_cap_mb * 1024 * 1024)
    first = getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", 1024 * 1024)
    buckets, _ = dist._compute_bucket_assignment_by_size(params, [min(first, cap), cap], [False] * len(params))
    out = []
    for idx in buckets:
        numel = sum(params[i].numel() for i in idx)
        out.append(torch.empty(numel, dtype=params[idx[0]].dtype, device=params[idx[0]].device))
    return out


def zero1_optimizer(optimizer, trained):
    """ZeroRedundancyOptimizer over the class and defaults of the optimizer `optimizer(params)` builds."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    probe = optimizer(trained)
    cls = type(probe)
    accepted = inspect.signature(cls.__init__).parameters
    defaults = {k: v for k, v in probe.defaults.items() if k in accepted and k != "params"}
    del probe
    return ZeroRedundancyOptimizer(trained, optimizer_class=cls, **defaults)


def shard_model(model, par, mesh, autocast_dtype):
    """fully_shard on each block and the root; the blocks are `par.shard(model)` or the modules of the model's
    largest nn.ModuleList (a transformer's layers, a CNN's stages)."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    blocks = list(par.shard(model)) if par.shard is not None else largest_module_list(model)
    mp = (MixedPrecisionPolicy(param_dtype=autocast_dtype, reduce_dtype=torch.float32) if autocast_dtype is not None
          else MixedPrecisionPolicy())
    for block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=par.reshard_after_forward)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=par.reshard_after_forward)
    return len(blocks)


def largest_module_list(model):
    import torch.nn as nn

    best = []
    for m in model.modules():
        if isinstance(m, nn.ModuleList) and len(m) > len(best):
            best = list(m)
    return best


def fake_model_copy(model, params, buffers):
    """The model's structure over the step's fake parameters and buffers (nothing real is copied)."""
    import copy

    import torch.nn as nn

    memo = {}
    for name, p in model.named_parameters():
        memo[id(p)] = nn.Parameter(params[name], requires_grad=p.requires_grad)
    for name, b in model.named_buffers():
        memo[id(b)] = buffers[name]
    return copy.deepcopy(model, memo)


@contextmanager
def fsdp_storage_events(rec):
    """FSDP2 frees and re-allocates its unsharded parameters by resizing their storages: recorded as frees and
    allocations (category unsharded_parameters)."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group

    saved = (_fsdp_param.alloc_storage, _fsdp_param.free_storage, _fsdp_param_group.alloc_storage)

    def alloc_storage(tensor):
        saved[0](tensor)
        rec.resized(tensor.untyped_storage(), "fsdp_unshard", "unsharded_parameters")

    def free_storage(tensor):
        rec.free_now(tensor.untyped_storage())
        saved[1](tensor)

    _fsdp_param.alloc_storage = _fsdp_param_group.alloc_storage = alloc_storage
    _fsdp_param.free_storage = free_storage
    try:
        yield
    finally:
        _fsdp_param.alloc_storage, _fsdp_param.free_storage, _fsdp_param_group.alloc_storage = saved
