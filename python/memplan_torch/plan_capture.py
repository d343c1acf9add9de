"""The training step as plan_step sees it: every ATen call of the model's forward (in order, with the module stack,
the storages it reads, makes and writes, and its roofline time) and every tensor autograd saves (through
saved-tensor hooks), recorded while estimate_step runs the unplanned step on fake tensors."""
import weakref
from dataclasses import dataclass, field

# ATen ops whose cost is mostly arithmetic (the min-cut partitioner's "compute intensive" ops): recomputed last.
COMPUTE_INTENSIVE = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "convolution", "_convolution",
                     "cudnn_convolution", "_scaled_dot_product_flash_attention",
                     "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                     "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention_for_cpu",
                     "_cudnn_rnn", "_grouped_mm", "_int_mm", "_scaled_mm"}


@dataclass
class OpCall:
    index: int            # position in the forward
    func: str             # the overload, as SAC's policy sees it: "aten.mm.default"
    packet: str           # "mm"
    stack: tuple          # ((module path, invocation), ...) outermost first
    reads: tuple          # storage ids read
    makes: tuple          # (storage id, bytes) of the storages it allocates
    writes: tuple         # storage ids it mutates in place
    seconds: float        # roofline time on the GPU
    sac_ignored: bool     # SAC's policy is not asked for it (detach, metadata ops)
    random: bool          # draws from the RNG (dropout): SAC must recompute it or save every later one


@dataclass
class Pack:
    index: int            # position among the forward's packs
    storage: int          # storage id
    nbytes: int
    stack: tuple
    op: int               # the OpCall during which autograd saved it (-1: none)


@dataclass
class StepCapture:
    calls: list = field(default_factory=list)
    packs: list = field(default_factory=list)
    owner: dict = field(default_factory=dict)       # storage id -> the last OpCall index that wrote it
    storage_bytes: dict = field(default_factory=dict)
    fixed: set = field(default_factory=set)         # storage ids of parameters and buffers
    outputs: set = field(default_factory=set)       # storage ids of the forward's outputs
    module_children: dict = field(default_factory=dict)  # path -> [child paths] in registration order
    sequential: set = field(default_factory=set)    # paths of nn.Sequential containers
    norm_modules: set = field(default_factory=set)  # paths of modules with running statistics
    module_args: dict = field(default_factory=dict)  # (path, invocation) -> storage ids of its positional tensors
    estimate: dict = field(default_factory=dict)    # estimate_step's report of the unplanned step
    # The link to estimate_step's record of births and deaths (plan_simulate replays it with a plan's changes)
    recorder: object = None                         # estimate._Recorder of the unplanned step
    block_of: dict = field(default_factory=dict)    # storage id -> the recorder's block id
    event_after_call: list = field(default_factory=list)  # per OpCall: len(recorder.events) once it returned
    event_at_unpack: dict = field(default_factory=dict)   # pack index -> len(recorder.events) at its first unpack


def _flops(packet, args, out):
    import torch

    def numel(t):
        return t.numel() if isinstance(t, torch.Tensor) else 0

    outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.Tensor)]
    if packet in ("mm", "addmm", "bmm", "baddbmm", "addbmm", "_int_mm", "_scaled_mm") and outs:
        a = args[1] if packet in ("addmm", "baddbmm", "addbmm") else args[0]
        return 2.0 * numel(outs[0]) * a.shape[-1]
    if packet in ("convolution", "_convolution", "cudnn_convolution") and outs:
        w = args[1]
        return 2.0 * numel(outs[0]) * (w.numel() // w.shape[0])
    if packet.startswith("_scaled_dot_product") and len(args) >= 3:
        q, k = args[0], args[1]
        return 4.0 * numel(q) * k.shape[-2]
    return float(sum(numel(o) for o in outs))


def _roofline(packet, args, out, speed, dtype):
    import torch

    moved = 0
    for t in list(args) + list(out if isinstance(out, (tuple, list)) else (out,)):
        if isinstance(t, torch.Tensor):
            moved += t.numel() * t.element_size()
    flops = _flops(packet, args, out)
    peak = speed["flops_low"] if dtype in (torch.float16, torch.bfloat16) else speed["flops_fp32"]
    return max(flops / peak, moved / speed["hbm_bytes_per_s"]) + speed["launch_s"]


class _Probe:
    """Module hooks, a dispatch mode and saved-tensor hooks that fill a StepCapture; only the last forward is kept
    (estimate_step runs two steps: the first builds the optimizer's state)."""

    def __init__(self, model, speed):
        self.model, self.speed = model, speed
        self.cap = StepCapture()
        self.sid = weakref.WeakKeyDictionary()
        self.next_sid = 0
        self.stack = []
        self.invocations = {}
        self.handles = []
        self.mode = None
        self.saved_hooks = None
        self.rec = None  # estimate_step's recorder of the attempt running

    def storage_id(self, t):
        st = t.untyped_storage()
        s = self.sid.get(st)
        if s is None:
            s = self.sid[st] = self.next_sid
            self.next_sid += 1
            self.cap.storage_bytes[s] = st.nbytes()
            if self.rec is not None:
                bid = self.rec.by_storage.get(st)
                if bid is not None:
                    self.cap.block_of[s] = bid
        return s

    def install(self):
        import torch

        for path, m in self.model.named_modules():
            self.cap.module_children[path] = [f"{path}.{n}" if path else n for n, _ in m.named_children()]
            if isinstance(m, torch.nn.Sequential):
                self.cap.sequential.add(path)
            if isinstance(m, torch.nn.modules.batchnorm._NormBase):
                self.cap.norm_modules.add(path)
            if path == "":
                self.handles.append(m.register_forward_pre_hook(self._root_pre))
                self.handles.append(m.register_forward_hook(self._root_post, always_call=True))
            else:
                self.handles.append(m.register_forward_pre_hook(self._pre(path)))
                self.handles.append(m.register_forward_hook(self._post, always_call=True))

    def remove(self):
        for h in self.handles:
            h.remove()

    def _pre(self, path):
        def hook(module, args):
            import torch

            n = self.invocations.get(path, 0)
            self.invocations[path] = n + 1
            self.stack.append((path, n))
            self.cap.module_args[(path, n)] = [self.storage_id(a) for a in args if isinstance(a, torch.Tensor)]
        return hook

    def _post(self, module, args, out):
        self.stack.pop()

    def _root_pre(self, module, args):
        import torch

        self.cap = StepCapture(module_children=self.cap.module_children, sequential=self.cap.sequential,
                               norm_modules=self.cap.norm_modules)
        self.invocations = {}
        self.stack = [("", 0)]
        self.sid = weakref.WeakKeyDictionary()
        for t in list(module.parameters()) + list(module.buffers()):
            self.cap.fixed.add(self.storage_id(t))
        self.mode = _probe_mode(self)()
        self.mode.__enter__()
        self.saved_hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self.saved_hooks.__enter__()

    def _root_post(self, module, args, out):
        import torch
        from torch.utils._pytree import tree_leaves

        self.saved_hooks.__exit__(None, None, None)
        self.mode.__exit__(None, None, None)
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.cap.outputs.add(self.storage_id(t))

    def _pack(self, t):
        s = self.storage_id(t)
        self.cap.packs.append(Pack(len(self.cap.packs), s, self.cap.storage_bytes[s], tuple(self.stack),
                                   len(self.cap.calls) - 1))
        return (self.cap, len(self.cap.packs) - 1, t)  # holds t as autograd would

    def _unpack(self, held):
        cap, i, t = held
        if self.rec is not None and i not in cap.event_at_unpack:
            cap.event_at_unpack[i] = len(self.rec.events)
        return t


def _probe_mode(probe):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from torch.utils.checkpoint import SAC_IGNORED_OPS

    class ProbeMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func._overloadpacket.__name__ if hasattr(func, "_overloadpacket") else str(func)
            reads = tuple(probe.storage_id(a) for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor))
            makes, writes = [], []
            schema = getattr(func, "_schema", None)
            written = set()
            if schema is not None:
                for i, a in enumerate(schema.arguments):
                    if a.alias_info is not None and a.alias_info.is_write:
                        v = args[i] if i < len(args) else kwargs.get(a.name)
                        for t in tree_leaves(v):
                            if isinstance(t, torch.Tensor):
                                written.add(probe.storage_id(t))
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    known = t.untyped_storage() in probe.sid
                    s = probe.storage_id(t)
                    if not known:
                        makes.append((s, probe.cap.storage_bytes[s]))
            writes = sorted(written)
            dtype = next((a.dtype for a in tree_leaves(args) if isinstance(a, torch.Tensor)), None)
            idx = len(probe.cap.calls)
            probe.cap.calls.append(OpCall(idx, str(func), packet, tuple(probe.stack), reads, tuple(makes),
                                          tuple(writes), _roofline(packet, args, out, probe.speed, dtype),
                                          func in SAC_IGNORED_OPS,
                                          torch.Tag.nondeterministic_seeded in getattr(func, "tags", ())))
            probe.cap.event_after_call.append(len(probe.rec.events) if probe.rec is not None else 0)
            for s, _ in makes:
                probe.cap.owner[s] = idx
            for s in writes:
                if s not in probe.cap.fixed:
                    probe.cap.owner[s] = idx
            return out

    return ProbeMode


def capture_step(model, example_inputs, speed, **estimate_kw):
    """The unplanned step's estimate and its capture (a StepCapture)."""
    from .estimate import estimate_step

    probe = _Probe(model, speed)
    probe.install()
    try:
        est = estimate_step(model, example_inputs, _on_recorder=lambda rec: setattr(probe, "rec", rec),
                            **estimate_kw)
    finally:
        probe.remove()
    probe.cap.estimate = est
    probe.cap.recorder = probe.rec
    return probe.cap
