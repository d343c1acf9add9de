"""estimate_step: what one PyTorch eager training step allocates on a GPU, found without the GPU.

The step runs on fake tensors (FakeTensorMode: shapes, dtypes and storages, no data) through PyTorch's own
dispatcher, autograd and optimizer, so the tensors it allocates, the ones autograd saves and the moment each
storage dies are PyTorch's own. What a fake CPU step does not decide the way a CUDA step does is set explicitly:
CUDA's autocast policies (autocast_rules), the scaled-dot-product-attention kernel the named GPU would run
(device_rules.sdpa_backend), CUDA's fused dropout (a one-byte mask), the foreach optimizer default, cuBLAS's
workspaces. Every storage's birth and death is replayed through a model of the CUDA caching allocator
(caching_allocator), which gives the allocated and reserved bytes as torch.cuda's statistics report them.
"""
import weakref
from contextlib import nullcontext
from collections import Counter, defaultdict

from .caching_allocator import CachingAllocator, round_size
from .data_parallel import as_data_parallel, fsdp_storage_events, local, zero1_optimizer
from .cuda_kernels import _ACC_BYTES as _REDUCTIONS
from .cuda_kernels import reduction_dims, reduction_staging_bytes
from .device_rules import gpu_rules, sdpa_backend
from .fake_values import KnownValues
from .step_loop import run_steps

REAL_RERUN_PARAM_BYTES = 1 << 30  # the largest model a data-dependent step is computed for on the host
REAL_RERUN_STEP_BYTES = 4 << 30   # and the most its fake step may have held before the read
CATEGORIES = ("parameters", "buffers", "inputs", "gradients", "optimizer_state", "autocast_weights",
              "saved_for_backward", "workspaces", "gradient_buckets", "unsharded_parameters", "other")
# ATen ops that run through cuBLAS on CUDA (each thread's first one allocates its handle's workspace).
_CUBLAS_OPS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "_addmm_activation",
               "addr", "_int_mm", "_scaled_mm"}


class _Recorder:
    """The storages' births and deaths in order, each with its bytes, step, phase and the op that made it."""

    def __init__(self):
        self.events = []      # ("alloc" | "free", block id)
        self.blocks = []      # per block: dict(bytes, step, phase, op, category)
        self.by_storage = weakref.WeakKeyDictionary()
        self.step = -1
        self.phase = "setup"
        self.gemm_threads = set()
        self.warnings = Counter()
        self.cudnn_reserves = []
        self.op_log = None  # a list when estimate_step(op_log=True): (step, phase, op, allocated after it)
        self.freed = set()  # blocks whose free is recorded
        self.known = None   # fake_values.KnownValues in a fake step

    def note(self, storage, op, category=None):
        if storage in self.by_storage:
            self.resized(storage, op, category)
            return
        nbytes = storage.nbytes()
        if nbytes == 0:
            return
        self._alloc(storage, nbytes, op, category)

    def resized(self, storage, op, category=None):
        """A storage seen again: resized in place (or given back and taken again) is a new block."""
        bid = self.by_storage.get(storage)
        nbytes = storage.nbytes()
        if bid is None:
            if nbytes:
                self._alloc(storage, nbytes, op, category)
            return
        if bid in self.freed or nbytes != self.blocks[bid]["bytes"]:
            if bid not in self.freed:
                self.freed.add(bid)
                self.events.append(("free", bid))
            if nbytes:
                self._alloc(storage, nbytes, op, category)

    def _alloc(self, storage, nbytes, op, category):
        bid = len(self.blocks)
        self.blocks.append({"bytes": nbytes, "step": self.step, "phase": self.phase, "op": op,
                            "category": category})
        self.by_storage[storage] = bid
        self.events.append(("alloc", bid))
        weakref.finalize(storage, self._finalized, bid)

    def mark(self, tensor, category, only_if_unset=False):
        st = local(tensor).untyped_storage()
        bid = self.by_storage.get(st)
        if bid is not None and not (only_if_unset and self.blocks[bid]["category"]):
            self.blocks[bid]["category"] = category

    def transient(self, sizes, op):
        """Blocks a kernel takes and gives back inside one op (after its outputs), in order."""
        bids = []
        for nbytes in sizes:
            if nbytes:
                bid = len(self.blocks)
                self.blocks.append({"bytes": nbytes, "step": self.step, "phase": self.phase, "op": op,
                                    "category": "workspaces"})
                self.events.append(("alloc", bid))
                bids.append(bid)
        for bid in reversed(bids):
            self.events.append(("free", bid))

    def sequence(self, items, op):
        """One op's allocations in the order its kernel makes them: ("hold", bytes) taken until the op ends,
        ("workspace", bytes) taken and given back at once, ("out", tensor) an output born there."""
        held = []
        for kind, val in items:
            if kind == "out":
                if val is not None:
                    self.note(val.untyped_storage(), op)
            elif val:
                bid = len(self.blocks)
                self.blocks.append({"bytes": val, "step": self.step, "phase": self.phase, "op": op,
                                    "category": "workspaces"})
                self.events.append(("alloc", bid))
                if kind == "hold":
                    held.append(bid)
                else:
                    self.events.append(("free", bid))
        for bid in reversed(held):
            self.events.append(("free", bid))

    def free_now(self, storage):
        """The block of `storage` given back here (its storage object may die later: that free is ignored)."""
        bid = self.by_storage.get(storage)
        if bid is not None and bid not in self.freed:
            self.freed.add(bid)
            self.events.append(("free", bid))

    def _finalized(self, bid):
        if bid not in self.freed:
            self.freed.add(bid)
            self.events.append(("free", bid))

    def workspace(self, nbytes, key):
        if key in self.gemm_threads or nbytes == 0:
            return
        self.gemm_threads.add(key)
        bid = len(self.blocks)
        self.blocks.append({"bytes": nbytes, "step": self.step, "phase": self.phase, "op": "cublas_workspace",
                            "category": "workspaces"})
        self.events.append(("alloc", bid))


def _modes(rec, rules, params_ids):
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    aten = torch.ops.aten
    data_dependent = _data_dependent_errors()

    class Track(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func._overloadpacket.__name__ if hasattr(func, "_overloadpacket") else str(func)
            if name in _CUBLAS_OPS:
                rec.workspace(rules.cublas_workspace_bytes, "backward" if rec.phase == "backward" else "forward")
            accumulate = rec.phase == "backward" and _inplace_accumulation(name, args, kwargs)
            if name == "_grouped_mm" and args[0].dtype != torch.bfloat16:
                out = _grouped_mm_meta(*args, **kwargs)  # PyTorch 2.11's meta kernel takes bf16 only
            elif rec.known is None:
                out = func(*args, **kwargs)
            else:
                try:
                    out = func(*args, **kwargs)
                except data_dependent as e:
                    out = rec.known.answer(func, args, kwargs)
                    if out is None:
                        raise e
                else:
                    rec.known.after(func, args, kwargs, out)
            if accumulate and isinstance(out, torch.Tensor) and out.shape == args[0].shape:
                rec.free_now(args[0].untyped_storage())
            if name in ("convolution", "convolution_backward"):
                rec.sequence(conv_sequence(name, args, out), name)
            if name == "_cudnn_rnn":
                out = _with_cudnn_reserve(args, out)
            if name in _REDUCTIONS and not any(isinstance(a, torch.Tensor) for a in args[1:]):
                dims = reduction_dims(name, args, kwargs)
                if dims is not None:
                    rec.transient(reduction_staging_bytes(name, args[0], dims, rules.multiprocessors,
                                                          rules.max_threads_per_multiprocessor), name)
            cat = None
            if name == "_to_copy" and args and isinstance(args[0], torch.Tensor) and id(args[0]) in params_ids:
                cat = "autocast_weights"
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    rec.note(local(t).untyped_storage(), name, cat)
            if rec.op_log is not None and name not in ("device", "dim", "sym_size", "sym_stride", "sym_numel"):
                rec.events.append(("op", name))
            return out

    class Rules(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.nn.functional.scaled_dot_product_attention or func is torch._C._nn.scaled_dot_product_attention:
                return _sdpa(rules, rec, *args, **kwargs)
            if func in (torch.nn.functional.dropout, torch.dropout, torch._VF.dropout):
                return _dropout(func, args, kwargs)
            if func in _RNN_FUNCS and not kwargs:
                r = _cudnn_rnn(func, args)
                if r is not None:
                    return r
            return func(*args, **kwargs)

    def _dropout(func, args, kwargs):
        # CUDA runs dropout as native_dropout (output and a bool mask); the CPU composite keeps a float noise.
        x = args[0] if args else kwargs["input"]
        p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
        train = args[2] if len(args) > 2 else kwargs.get("train", kwargs.get("training", True))
        inplace = args[3] if len(args) > 3 else kwargs.get("inplace", False)
        if not train or p == 0 or inplace or not x.is_floating_point() or x.numel() == 0:
            with torch._C.DisableTorchFunction():
                return func(*args, **kwargs)
        if p == 1:
            return x * 0
        return aten.native_dropout(x, p, True)[0]

    def _inplace_accumulation(name, args, kwargs):
        """Autograd sums a tensor's gradients in place (InputBuffer::accumulate: old.add_(new)) when it holds the
        only reference to a dense buffer; under fake tensors (a tensor subclass) it adds out of place. The
        accumulating add is the engine's add of two same-shaped gradients; its first operand is the buffer, alone
        when its storage's count is the dispatcher's 2 (measured the same for real and fake tensors)."""
        if name != "add" or len(args) != 2 or kwargs or not all(isinstance(a, torch.Tensor) for a in args):
            return False
        from torch._prims_common import is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense

        a, b = args
        return (a.shape == b.shape and a.dtype == b.dtype and is_non_overlapping_and_dense(a)
                and torch._C._storage_Use_Count(a.untyped_storage()._cdata) <= 2)

    def conv_sequence(name, args, out):
        return _conv_sequence(name, args, out)

    _RNN_FUNCS = {torch._VF.lstm: 2, torch._VF.gru: 3, torch._VF.rnn_tanh: 1, torch._VF.rnn_relu: 0}

    def _cudnn_rnn(func, args):
        """CUDA runs torch.nn's recurrent layers as one cuDNN kernel (_cudnn_rnn) that saves a reserve for the
        backward; the CPU runs them step by step. Dense (unpacked) inputs only."""
        if len(args) != 9 or not isinstance(args[1], (torch.Tensor, tuple, list)) or not isinstance(args[2], (list, tuple)):
            return None
        x, hx, weights, bias, layers, dropout, train, bidir, batch_first = args
        mode = _RNN_FUNCS[func]
        h0, c0 = (hx[0], hx[1]) if mode == 2 else (hx, None)
        hidden = (c0 if c0 is not None else h0).shape[-1]
        proj = h0.shape[-1] if mode == 2 and h0.shape[-1] != hidden else 0
        stride0 = (4 if bias else 2) + (1 if proj else 0)
        if torch.is_autocast_enabled("cpu"):
            # _cudnn_rnn's CUDA autocast kernel casts input, states and weights (re-flattened) to the low dtype
            low = torch.get_autocast_dtype("cpu")
            x, h0 = x.to(low), h0.to(low)
            c0 = c0.to(low) if c0 is not None else None
            weights = [w.to(low) for w in weights]
        with torch._C.DisableTorchFunction():
            out = aten._cudnn_rnn(x, list(weights), stride0, weights[0].detach(), h0, c0, mode, hidden, proj, layers, batch_first,
                                  dropout, train, bidir, [], None)
        return (out[0], (out[1], out[2])) if mode == 2 else (out[0], out[1])

    def _with_cudnn_reserve(args, out):
        # cuDNN's training reserve (cudnnGetRNNTrainingReserveSize), which the meta kernel leaves empty; fitted
        # on the H100/H200 (bench/gpu_rules_probe.py): per layer and direction, seq x batch x hidden elements
        # times 5 (LSTM), 6 (GRU) or 1 (RNN), plus one layer output between stacked layers.
        x, mode, hidden, layers, batch_first, train, bidir = (args[0], args[6], args[7], args[9], args[10],
                                                              args[12], args[13])
        if not train:
            return out
        seq, batch = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
        dirs = 2 if bidir else 1
        per = {2: 5, 3: 6}.get(mode, 1)
        unit = dirs * seq * batch * hidden * x.element_size()
        nbytes = layers * unit * per + (layers - 1) * unit
        reserve = torch.empty(nbytes, dtype=torch.uint8, device=x.device)
        rec.cudnn_reserves.append(nbytes)
        return (out[0], out[1], out[2], reserve, out[4])

    return Track, Rules


def _conv_sequence(name, args, out):
    """A CUDA convolution's allocations in order (aten/src/ATen/native/Convolution.cpp, cudnn/ConvShared.cpp):
    the contiguous copies of operands not laid out as the kernel runs (held through the op), each output, and
    after it the cuDNN workspace of the pass that wrote it (device_rules.conv_workspace_bytes)."""
    import torch

    from .device_rules import conv_backend, conv_memory_format, conv_workspace_bytes

    def copy_bytes(t, fmt):
        if t.dim() not in (4, 5):
            fmt = torch.contiguous_format
        return 0 if t.is_contiguous(memory_format=fmt) else t.numel() * t.element_size()

    if name == "convolution":
        x, w, stride, dilation, transposed, groups = args[0], args[1], args[3], args[5], args[6], args[8]
        fmt = conv_memory_format(x, w)
        items = [("hold", copy_bytes(x, fmt)), ("hold", copy_bytes(w, fmt)), ("out", out)]
        if not transposed and conv_backend(x, w, transposed, groups) == "cudnn":
            items.append(("workspace", conv_workspace_bytes(x, w, out, _expand(stride, x), _expand(dilation, x),
                                                            groups, "forward")))
        return items
    go, x, w = args[0], args[1], args[2]
    stride, dilation, transposed, groups, mask = args[4], args[6], args[7], args[9], args[10]
    fmt = conv_memory_format(x, w)
    cudnn = not transposed and conv_backend(x, w, transposed, groups) == "cudnn"
    gi, gw, gb = out
    items = [("hold", copy_bytes(go, fmt)), ("hold", copy_bytes(x, fmt) if mask[1] else 0),
             ("hold", copy_bytes(w, fmt) if mask[0] else 0), ("out", gi)]
    st, dl = _expand(stride, x), _expand(dilation, x)
    if cudnn and gi is not None:
        items.append(("workspace", conv_workspace_bytes(x, w, go, st, dl, groups, "backward_data")))
    items.append(("out", gw))
    if cudnn and gw is not None:
        items.append(("workspace", conv_workspace_bytes(x, w, go, st, dl, groups, "backward_filter")))
    return items  # the bias gradient (a reduction after the copies are gone) is noted with the outputs


def _expand(v, x):
    v = list(v)
    return v * (x.dim() - 2) if len(v) == 1 else v


def _cudnn_rnn_backward_meta(input, weight, weight_stride0, weight_buf, hx, cx, output, grad_output, grad_hy,
                             grad_cy, mode, hidden_size, proj_size, num_layers, batch_first, dropout, train,
                             bidirectional, batch_sizes, dropout_state, reserve, output_mask):
    """Shapes of cuDNN's RNN backward (no meta kernel in PyTorch): the weight gradients are views of one flat
    buffer, as cuDNN writes them."""
    import torch

    dx = torch.empty_like(input) if output_mask[0] else None
    dhx = torch.empty_like(hx) if output_mask[1] else None
    dcx = torch.empty_like(cx) if (output_mask[2] and cx is not None) else None
    dw = []
    if output_mask[3]:
        flat = torch.empty(sum(w.numel() for w in weight), dtype=weight[0].dtype, device=input.device)
        off = 0
        for w in weight:
            dw.append(flat[off:off + w.numel()].view(w.shape))
            off += w.numel()
    return dx, dhx, dcx, dw


def _sdpa(rules, rec, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
          enable_gqa=False):
    import torch

    aten = torch.ops.aten
    if torch.is_autocast_enabled("cpu"):
        # SDPA is on CUDA autocast's lower-precision list: its floating inputs are cast before the kernel is chosen
        low = torch.get_autocast_dtype("cpu")

        def cast(t):
            return t.to(low) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != low else t

        query, key, value, attn_mask = cast(query), cast(key), cast(value), cast(attn_mask)
    backend = sdpa_backend(rules, query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    rec.warnings[f"sdpa:{backend}"] += 1
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    if backend == "flash":
        return aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, False,
                                                        scale=scale)[0]
    if backend == "cudnn":
        return aten._scaled_dot_product_cudnn_attention(query, key, value, None, grad, dropout_p, is_causal, False,
                                                        scale=scale)[0]
    if backend == "efficient":
        bias = attn_mask
        if bias is not None and bias.dtype == torch.bool:
            # SDPA turns a boolean mask into an additive one of the query's dtype before the kernel
            bias = torch.zeros_like(bias, dtype=query.dtype).masked_fill_(bias.logical_not(), float("-inf"))
        if bias is not None:
            bias = _pad_bias(bias, query)
        return aten._scaled_dot_product_efficient_attention(query, key, value, bias, grad, dropout_p, is_causal,
                                                            scale=scale)[0]
    return aten._scaled_dot_product_attention_math(query, key, value, attn_mask, dropout_p, is_causal, None,
                                                   scale=scale, enable_gqa=enable_gqa)[0]


def _pad_bias(bias, query):
    """SDPA's efficient path pads the bias's last dim to a multiple of 16 elements (sdp::preprocess_mask,
    pad_bias): the bias as given is padded, then expanded to the attention's (batch, heads, q, k) (measured: a
    (1, heads, q, k) bias is copied once, not once per batch element)."""
    import torch

    target = (query.shape[0], query.shape[1], query.shape[-2], bias.shape[-1])
    if bias.dim() < 4:
        bias = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape))
    k = bias.shape[-1]
    if k % 16 == 0:
        return bias.expand(target)
    padded = torch.empty(*bias.shape[:-1], (k + 15) // 16 * 16, dtype=bias.dtype, device=bias.device)
    padded[..., :k].copy_(bias)
    return padded[..., :k].expand(target)


def _default_foreach(opt):
    """torch.optim chooses foreach on CUDA when the user left it unset (_default_to_fused_or_foreach); a fake
    CPU parameter would make it choose the for-loop, so the estimate sets what CUDA would choose."""
    for g in opt.param_groups:
        if "foreach" in g and g["foreach"] is None and not g.get("fused") and not g.get("differentiable"):
            g["foreach"] = True


def estimate_step(model, example_inputs, *, loss_fn, targets=(), optimizer=None, autocast_dtype=None,
                  device="cuda", gpu="h100", steps=None, trace_path=None, op_log=False, parallel=None, _on_recorder=None):
    """Peak allocated and reserved bytes of one steady-state training step of `model` as PyTorch eager runs it on
    `gpu`, without a GPU. `example_inputs` and `targets`: tuples of CPU tensors at the real sizes (placed on the
    device each step); `loss_fn(output, *targets)` -> loss; `optimizer(params)` -> a torch optimizer, or None;
    `autocast_dtype`: torch.bfloat16 / torch.float16 for torch.autocast, or None. `parallel`: a
    memplan_torch.DataParallel (or a dict of its arguments): one rank of a DDP, ZeRO-1 or FSDP2 step, the inputs
    being that rank's batch; the report then holds `ranks` (one entry per rank estimated) and its top-level
    figures are those of the rank with the highest peak. Returns a dict (docs/torch.md, "estimate_step");
    `trace_path` also writes the measured step as an allocation trace (`memplan viz --trace`). `steps`: steps run,
    the last reported (default 2; 3 under DDP and ZeRO-1, whose second step rebuilds the gradient buckets)."""
    from .data_parallel import fake_process_group

    if str(device).split(":")[0] != "cuda":
        raise ValueError(f"estimate_step predicts CUDA steps: device must be 'cuda', not {device!r}")
    par = as_data_parallel(parallel)
    if steps is None:
        steps = 3 if par is not None and par.layout in ("ddp", "zero1") else 2
    if steps < 2:
        raise ValueError("estimate_step needs at least 2 steps (the last one is the steady state)")
    rules = gpu_rules(gpu)
    example_inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    targets = tuple(targets) if isinstance(targets, (tuple, list)) else (targets,)
    args = (model, example_inputs, targets, loss_fn, optimizer, autocast_dtype, steps, rules, op_log, _on_recorder)
    if par is None:
        report, rec = _estimate_once(*args, layout=None)
    else:
        per_rank = []
        for rank in par.roles():
            with fake_process_group(par.world_size, rank) as mesh:
                per_rank.append((rank,) + _estimate_once(*args, layout=(par, mesh)))
        rank, report, rec = max(per_rank, key=lambda r: (r[1]["peak_allocated_bytes"], -r[0]))
        report["parallel"] = dict(par.describe(), rank=rank)
        report["ranks"] = [dict(rank=r, **{k: rep[k] for k in _RANK_FIELDS if k in rep}) for r, rep, _ in per_rank]
    if trace_path:
        from .trace_io import write_trace
        write_trace(trace_path, rec, report, steps)
    return report


_RANK_FIELDS = ("before_step_bytes", "before_forward_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "run_peak_allocated_bytes",
                "run_peak_reserved_bytes", "peak_phase", "peak_op",
                "breakdown_at_peak")


def _estimate_once(model, example_inputs, targets, loss_fn, optimizer, autocast_dtype, steps, rules, op_log,
                   _on_recorder, layout):
    from torch._subclasses.fake_tensor import FakeTensorMode

    was_training = model.training
    model.train()
    notes = []
    try:
        result = None
        # 1. fake tensors that libraries cannot tell from real ones (they take their GPU path); 2. on a
        # data-dependent read (a routing decision, a mask check), real CPU tensors at the example's values, for
        # a model whose parameters fit REAL_RERUN_PARAM_BYTES and whose step fits the host (it computes); 3. fake
        # tensors libraries can see (they take their tracing path, built to avoid such reads)
        param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        reached = 0  # the most bytes the fake step held before it stopped
        for attempt in ("fake", "real", "visible fake"):
            if attempt == "real" and (param_bytes > REAL_RERUN_PARAM_BYTES or reached > REAL_RERUN_STEP_BYTES):
                notes.append(f"no real rerun: {param_bytes} parameter bytes (limit {REAL_RERUN_PARAM_BYTES}), "
                             f"{reached} bytes held before the read (limit {REAL_RERUN_STEP_BYTES})")
                continue
            rec = _Recorder()
            rec.op_log = [] if op_log else None
            if _on_recorder is not None:  # plan_capture reads the births and deaths beside its own record
                _on_recorder(rec)
            try:
                if attempt == "real":
                    with _cpu_kernels_for_cuda_ops():
                        result = _run(model, example_inputs, targets, loss_fn, optimizer, autocast_dtype, steps,
                                      rules, rec, lambda t: t.detach().clone(), layout)
                else:
                    fake = FakeTensorMode(allow_non_fake_inputs=True)
                    rec.known = KnownValues(fake)
                    with fake, (_fakes_unseen() if attempt == "fake" else nullcontext()):
                        result = _run(model, example_inputs, targets, loss_fn, optimizer, autocast_dtype, steps,
                                      rules, rec, lambda t, fake=fake: fake.from_tensor(t).clone(), layout)
                break
            except _data_dependent_errors() as e:
                notes.append(f"the {attempt} step stopped at a data-dependent read ({type(e).__name__})")
                if attempt == "fake":
                    reached = _held_so_far(rec)
            except (MemoryError, RuntimeError) as e:
                if attempt != "real" or "allocate" not in str(e):
                    raise
                notes.append("the real rerun does not fit the host's memory")
        if result is not None and rec.known is not None and rec.known.reads_answered:
            notes.append(f"{rec.known.reads_answered} data-dependent reads answered from the example's values "
                         "(computed beside the fake step from the inputs and buffers)")
        if result is not None and attempt == "visible fake":
            notes.append("estimated on the model's tracing path (its GPU path reads tensor values)")
        elif result is not None and attempt == "real":
            notes.append("data-dependent step: estimated at the example's values on real CPU tensors")
    finally:
        model.train(was_training)
    if result is None:
        raise RuntimeError("estimate_step: no attempt completed the step (" + "; ".join(notes) + ")")
    report = _replay(rec, steps, rules)
    report.update(result)
    report["gpu"] = rules.name
    report["notes"] = notes
    if rec.cudnn_reserves:
        report["cudnn_rnn_reserve_bytes"] = max(rec.cudnn_reserves)
    return report, rec


class _fakes_unseen:
    """Libraries take another path when they see a FakeTensor (transformers builds explicit attention masks, as
    for tracing: `isinstance(x, torch._subclasses.FakeTensor)`); the estimate wants the path a GPU step takes, so
    the package-level name stops matching while the step runs (PyTorch's own code holds the class itself)."""

    def __enter__(self):
        import torch

        class _NotFake:
            pass

        self.saved = torch._subclasses.FakeTensor
        torch._subclasses.FakeTensor = _NotFake
        return self

    def __exit__(self, *exc):
        import torch

        torch._subclasses.FakeTensor = self.saved
        return False


def _held_so_far(rec):
    """The most bytes live at once in what a stopped step recorded."""
    live, held, peak = 0, set(), 0
    for kind, bid in rec.events:
        if kind == "alloc":
            held.add(bid)
            live += rec.blocks[bid]["bytes"]
            peak = max(peak, live)
        elif kind == "free" and bid in held:
            held.discard(bid)
            live -= rec.blocks[bid]["bytes"]
    return peak


def _data_dependent_errors():
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    return (DataDependentOutputException, DynamicOutputShapeException, GuardOnDataDependentSymNode)


def _device_copy(t, to_device):
    """The step's device copy of a parameter or buffer; one built on the meta device (no data) becomes an empty
    tensor of its shape, so models too large for the host can be estimated."""
    import torch

    if t.device.type == "meta":
        if not isinstance(torch.empty(0), torch._subclasses.fake_tensor.FakeTensor):
            raise ValueError("a model on the meta device has no values to compute a data-dependent step with")
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")
    return to_device(t)


class _cpu_kernels_for_cuda_ops:
    """CPU kernels, while entered, for the CUDA-only ops the estimate runs (the attention kernels, cuDNN RNN):
    each output is allocated with the shape, strides and dtype of the op's meta kernel; the attention output
    is computed by the math path (its values can steer a data-dependent step), the rest left empty."""

    OPS = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
           "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_backward",
           "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_cudnn_attention_backward",
           "_cudnn_rnn", "_cudnn_rnn_backward")

    def __enter__(self):
        import torch

        self.lib = torch.library.Library("aten", "IMPL")
        for name in self.OPS:
            op = getattr(torch.ops.aten, name).default
            self.lib.impl(name, self._kernel(op, name), "CPU")
        return self

    def __exit__(self, *exc):
        self.lib._destroy()
        return False

    @staticmethod
    def _kernel(op, name):
        import torch
        from torch.utils._pytree import tree_map

        def to_meta(x):
            return x.to("meta") if isinstance(x, torch.Tensor) else x

        def kernel(*args, **kwargs):
            shapes = op(*tree_map(to_meta, args), **tree_map(to_meta, kwargs))

            def real(m):
                if isinstance(m, torch.Tensor):
                    return torch.empty_strided(m.shape, m.stride(), dtype=m.dtype, device="cpu")
                return m

            out = tree_map(real, shapes)
            if name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                        "_scaled_dot_product_cudnn_attention"):
                q, k, v = args[:3]
                with torch._C.DisableTorchFunction():
                    o = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, enable_gqa=q.shape[1] != k.shape[1])[0]
                out[0].copy_(o)
            return out

        return kernel


def _grouped_mm_meta(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """torch._grouped_mm's output for every dtype the CUDA kernel takes (PyTorch 2.11's meta kernel checks bf16)."""
    import torch

    dtype = out_dtype or mat_a.dtype
    if mat_a.dim() == 2 and mat_b.dim() == 3:
        shape = (mat_a.shape[0], mat_b.shape[-1])
    elif mat_a.dim() == 3 and mat_b.dim() == 3:
        shape = (mat_a.shape[0], mat_a.shape[1], mat_b.shape[-1])
    elif mat_a.dim() == 2 and mat_b.dim() == 2:
        shape = (offs.shape[0], mat_a.shape[0], mat_b.shape[1])
    else:
        shape = (mat_a.shape[1], mat_b.shape[-1])
    return torch.empty(shape, dtype=dtype, device=mat_a.device)


def _run(model, inputs, targets, loss_fn, optimizer, autocast_dtype, steps, rules, rec, to_device, layout=None):
    import torch
    from torch.func import functional_call

    from .autocast_rules import CudaAutocastOnCpu

    params = {}
    rec.phase = "parameters"
    for name, p in model.named_parameters():
        params[name] = _device_copy(p.detach(), to_device).requires_grad_(p.requires_grad)
        rec.note(params[name].untyped_storage(), "parameter", "parameters")
    buffers = {}
    rec.phase = "buffers"
    for name, b in model.named_buffers():
        t = _device_copy(b, to_device)
        buffers[name] = t
        if rec.known is not None:
            rec.known.seed(t, b)
        rec.note(t.untyped_storage(), "buffer", "buffers")
    par, mesh = layout if layout is not None else (None, None)
    if par is not None and par.layout == "fsdp2":
        forward, trained = _fully_sharded(model, params, buffers, par, mesh, autocast_dtype, rec)
        autocast_dtype = None  # FSDP2 computes in the policy's dtype, without autocast
        del params
        buckets = []
    else:
        state = dict(buffers)
        state.update(params)
        trained = [p for p in params.values() if p.requires_grad]

        def forward(*x):
            return functional_call(model, state, x, strict=False, tie_weights=True)

        buckets = _gradient_buckets(trained, par, rec) if par is not None else []
    stale = []
    params_ids = {id(p) for p in trained}
    if optimizer is None:
        opt = None
    elif par is not None and par.layout == "zero1":
        opt = zero1_optimizer(optimizer, trained)
        _default_foreach(opt.optim)
    else:
        opt = optimizer(trained)
        _default_foreach(opt)
    Track, Rules = _modes(rec, rules, params_ids)
    ac = CudaAutocastOnCpu(autocast_dtype) if autocast_dtype is not None else None

    def autocast():
        return _Autocast(ac, autocast_dtype)

    def place(objs):
        return tuple(to_device(o) if isinstance(o, torch.Tensor) else o for o in objs)

    def on_phase(step, name):
        rec.step, rec.phase = step, name
        if name == "forward" and step == 1 and buckets:
            # DDP rebuilds its buckets once, in the second forward, in the order the gradients became ready. The
            # old ones are held by the first step's NCCL work objects until the process group's watchdog thread
            # releases them, at a moment no rank controls: kept here through the second step (the bound measured
            # on most ranks), released at its end
            stale[:] = buckets
            buckets[:] = _gradient_buckets(trained, par, rec, hooks=False)
            rec.phase = name
        if name == "end":
            stale.clear()
        if name == "end" or name == "optimizer":
            for p in trained:
                if p.grad is not None:
                    rec.mark(p.grad, "gradients")
        if name == "end" and opt is not None:
            for st in getattr(opt, "optim", opt).state.values():
                for v in st.values():
                    if isinstance(v, torch.Tensor):
                        rec.mark(v, "optimizer_state")

    def pack(t):
        if isinstance(t, torch.Tensor):
            rec.mark(t, "saved_for_backward", only_if_unset=True)
        return t

    placed = []

    def place_inputs(objs):
        out = place(objs)
        for t, o in zip(out, objs):
            if isinstance(t, torch.Tensor):
                rec.mark(t, "inputs")
                if rec.known is not None:
                    rec.known.seed(t, o)
        placed.append(out)
        return out

    metas = torch.library.Library("aten", "IMPL")
    metas.impl("_cudnn_rnn_backward", _cudnn_rnn_backward_meta, "Meta")

    sharded = par is not None and par.layout == "fsdp2"
    with _Destroy(metas), (fsdp_storage_events(rec) if sharded else nullcontext()), \
            (ac if ac is not None else nullcontext()), Rules(), Track(), \
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out, loss = run_steps(forward, trained, inputs, targets, loss_fn, opt, autocast if ac else None, steps,
                              place_inputs, on_phase)
        loss_value = loss.detach()
        del out, loss, placed[:], buckets, stale
    return {"sdpa_kernels": {k[5:]: v for k, v in rec.warnings.items() if k.startswith("sdpa:")},
            "loss_dtype": str(loss_value.dtype).replace("torch.", "")}


def _fully_sharded(model, params, buffers, par, mesh, autocast_dtype, rec):
    """The model over the step's fake tensors with fully_shard applied (PyTorch's FSDP2 on the fake process
    group): its forward and its sharded parameters, noted as this rank's parameters (the full ones die here)."""
    from .data_parallel import fake_model_copy, shard_model

    wrapped = fake_model_copy(model, params, buffers)
    params.clear()
    shard_model(wrapped, par, mesh, autocast_dtype)
    rec.phase = "parameters"
    for p in wrapped.parameters():
        rec.note(local(p).untyped_storage(), "fully_shard", "parameters")
    trained = [p for p in wrapped.parameters() if p.requires_grad]
    return (lambda *x: wrapped(*x)), trained


def _gradient_buckets(trained, par, rec, hooks=True):
    """DDP's gradient buckets, noted where the reducer allocates them (its construction, after the parameters);
    with gradient_as_bucket_view the gradients are views of them, so autograd's own dies once copied in."""
    from .data_parallel import ddp_buckets

    rec.phase = "gradient_buckets"
    buckets = ddp_buckets(trained, par)
    for b in buckets:
        rec.note(b.untyped_storage(), "ddp_bucket", "gradient_buckets")
        rec.mark(b, "gradient_buckets")  # seen first by the dispatch mode when allocated inside the step
    if par.gradient_as_bucket_view and hooks:
        for p in trained:
            p.register_post_accumulate_grad_hook(lambda q: rec.free_now(q.grad.untyped_storage()))
    return buckets


class _Destroy:
    def __init__(self, lib):
        self.lib = lib

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.lib._destroy()
        return False


class _Autocast:
    """torch.autocast on the fake CPU device with CUDA's policies; leaving it clears the weight-cast cache as
    leaving the outermost CUDA autocast region does."""

    def __init__(self, rules, dtype):
        self.rules, self.dtype, self.cm = rules, dtype, None

    def __enter__(self):
        import torch

        self.cm = torch.autocast("cpu", dtype=self.dtype)
        return self.cm.__enter__()

    def __exit__(self, *exc):
        r = self.cm.__exit__(*exc)
        self.rules.clear_cache()
        return r


def _replay(rec, steps, rules):
    """The recorded births and deaths through the caching allocator; the last step's figures."""
    alloc = CachingAllocator()
    live = {}
    last = steps - 1
    before = before_forward = None
    peak_at_event = -1
    cur_step = -1
    ops = rec.op_log
    op_step = -1
    for i, (kind, bid) in enumerate(rec.events):
        if kind == "op":
            ops.append((op_step, bid, alloc.allocated))
            continue
        b = rec.blocks[bid]
        op_step = max(op_step, b["step"])
        if kind == "alloc":
            if b["step"] == last and b["phase"] == "forward" and before_forward is None:
                before_forward = alloc.allocated
            if b["step"] == last and before is None:
                before = alloc.allocated
                run_peak = (alloc.peak_allocated, alloc.peak_reserved)
                alloc.reset_peak()
                cur_step = last
            live[bid] = alloc.alloc(b["bytes"])
            if cur_step == last and alloc.allocated == alloc.peak_allocated:
                peak_at_event = i
        else:
            blk = live.pop(bid, None)
            if blk is not None:
                alloc.free(blk)
    if before is None:
        raise RuntimeError("the last step allocated nothing: nothing to estimate")
    # What was live at the peak, by category
    live_at_peak = set()
    for kind, bid in rec.events[:peak_at_event + 1]:
        if kind == "op":
            continue
        if kind == "alloc":
            live_at_peak.add(bid)
        else:
            live_at_peak.discard(bid)
    by_cat = defaultdict(int)
    for bid in live_at_peak:
        b = rec.blocks[bid]
        by_cat[b["category"] or "other"] += round_size(b["bytes"])
    peak_block = rec.blocks[rec.events[peak_at_event][1]]
    return {
        "before_step_bytes": before,
        "before_forward_bytes": before_forward if before_forward is not None else before,
        "peak_allocated_bytes": alloc.peak_allocated,
        "peak_reserved_bytes": alloc.peak_reserved,
        "run_peak_allocated_bytes": max(run_peak[0], alloc.peak_allocated),
        "run_peak_reserved_bytes": max(run_peak[1], alloc.peak_reserved),
        "segments": alloc.segments,
        "peak_phase": peak_block["phase"],
        "peak_op": peak_block["op"],
        "breakdown_at_peak": {c: by_cat.get(c, 0) for c in CATEGORIES if by_cat.get(c, 0)},
        "allocations_per_step": sum(1 for k, bid in rec.events if k == "alloc" and rec.blocks[bid]["step"] == last),
        **({"op_log": [(n, a) for s, n, a in ops if s == last]} if ops is not None else {}),
    }
