"""A step plan applied to the user's own model in eager mode: each planned region runs under
torch.utils.checkpoint with a selective-checkpoint policy (MUST_SAVE / PREFER_RECOMPUTE per op call), and the
tensors the plan offloads leave through saved-tensor hooks (OffloadHooks): copied to pinned host memory on a side
stream as the forward saves them, copied back ahead of the backward op that needs them."""
import functools
import hashlib
import weakref
from collections import Counter
from contextlib import nullcontext

from ._lib import MemplanTorchError


class PlanMismatch(MemplanTorchError):
    """The model a plan is applied to is not the one it was made for (modules, parameter or buffer shapes)."""


def model_structure(model):
    rows = [f"module {n or '.'} {type(m).__name__}" for n, m in model.named_modules()]
    rows += [f"parameter {n} {list(p.shape)} {str(p.dtype)[6:]} {int(p.requires_grad)}"
             for n, p in model.named_parameters()]
    rows += [f"buffer {n} {list(b.shape)} {str(b.dtype)[6:]}" for n, b in model.named_buffers()]
    return rows


def fingerprint(rows):
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:32]


def check_model(policy, model):
    rows = model_structure(model)
    if fingerprint(rows) == policy["fingerprint"]:
        return
    want = policy.get("structure") or []
    diff = [f"- {r}" for r in want if r not in set(rows)][:4] + [f"+ {r}" for r in rows if r not in set(want)][:4]
    raise PlanMismatch(f"this plan was made for another model (fingerprint {policy['fingerprint']}, the model's "
                       f"{fingerprint(rows)}): " + ("; ".join(diff) if diff else "module order differs"))


class _Handle:
    __slots__ = ("pos", "host", "done", "dev", "ready", "uses", "meta", "__weakref__")


class OffloadHooks:
    """Saved tensors to host memory and back. CUDA: pack copies on a side stream after an event of the compute
    stream (the source is kept from reuse by record_stream), unpack waits on the copy-back's event; unpacking one
    tensor starts the copy back of the next `prefetch` ones the backward will need (saved earlier). No host
    synchronisation. CPU: the side stream is one worker thread and its futures the events. Fake tensors (an
    estimate): the host copy is a meta tensor outside every dispatch mode, so only the device side is counted.
    `copy(dst, src)` does each copy (tests pass a slow one)."""

    def __init__(self, prefetch=2, copy=None, host_invisible=False):
        self.prefetch = prefetch
        self.copy = copy or (lambda dst, src: dst.copy_(src, non_blocking=True))
        self.host_invisible = host_invisible
        self.handles = []
        self.seen = weakref.WeakKeyDictionary()
        self.side = {}
        self.worker = None

    def reset(self):
        self.handles = []
        self.seen = weakref.WeakKeyDictionary()

    def pack(self, t):
        import torch
        from torch._subclasses.fake_tensor import is_fake
        from torch.utils._python_dispatch import _disable_current_modes

        st = t.untyped_storage()
        views = self.seen.get(st)
        key = (t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if views is not None and key in views and views[key]() is not None:
            h = views[key]()
            h.uses += 1
            return h
        h = _Handle()
        h.pos, h.dev, h.ready, h.uses, h.done = len(self.handles), None, None, 1, None
        dense = _dense(t)
        h.meta = (tuple(t.shape), tuple(t.stride()) if dense else None, t.dtype, t.device)
        if is_fake(t) or self.host_invisible:
            with _disable_current_modes():
                h.host = (torch.empty(t.shape, dtype=t.dtype, device="meta") if is_fake(t)
                          else t.detach().clone())
        elif t.device.type == "cuda":
            compute = torch.cuda.current_stream(t.device)
            side = self._side(t.device)
            side.wait_stream(compute)
            with torch.cuda.stream(side):
                h.host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                self.copy(h.host, t.detach())
                h.done = torch.cuda.Event()
                h.done.record(side)
            t.record_stream(side)
        else:
            h.host = torch.empty(t.shape, dtype=t.dtype)
            src = t.detach()
            h.done = self._worker().submit(self._run_copy, h.host, src)
        self.seen.setdefault(st, {})[key] = weakref.ref(h)
        self.handles.append(weakref.ref(h))
        return h

    def _run_copy(self, dst, src):
        import torch

        with torch.no_grad():
            self.copy(dst, src)
        return dst

    def _worker(self):
        if self.worker is None:
            from concurrent.futures import ThreadPoolExecutor

            self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memplan-offload")
        return self.worker

    def _side(self, device):
        import torch

        if device not in self.side:
            self.side[device] = torch.cuda.Stream(device)
        return self.side[device]

    def _fetch(self, h):
        import torch
        from torch.utils._python_dispatch import _disable_current_modes

        shape, stride, dtype, device = h.meta
        dev = (torch.empty_strided(shape, stride, dtype=dtype, device=device) if stride is not None
               else torch.empty(shape, dtype=dtype, device=device))
        if h.host.device.type == "meta":
            pass  # fake: only the device tensor's size matters
        elif self.host_invisible:
            with _disable_current_modes():
                dev.copy_(h.host)
        elif device.type == "cuda":
            compute = torch.cuda.current_stream(device)
            side = self._side(device)
            side.wait_stream(compute)  # dev's block may still be read by earlier kernels of the compute stream
            with torch.cuda.stream(side):
                side.wait_event(h.done)
                self.copy(dev, h.host)
                h.ready = torch.cuda.Event()
                h.ready.record(side)
            dev.record_stream(side)
        else:
            done = h.done
            h.ready = self._worker().submit(lambda: (done.result(), self._run_copy(dev, h.host)))
        h.dev = dev

    def unpack(self, h):
        import torch

        if not isinstance(h, _Handle):
            return h
        if h.dev is None:
            self._fetch(h)
        for p in range(h.pos - 1, max(-1, h.pos - 1 - self.prefetch), -1):
            other = self.handles[p]() if p < len(self.handles) else None
            if other is not None and other.dev is None and other.uses > 0:
                self._fetch(other)
        dev = h.dev
        if isinstance(h.ready, torch.cuda.Event):
            torch.cuda.current_stream(dev.device).wait_event(h.ready)
        elif h.ready is not None and hasattr(h.ready, "result"):
            h.ready.result()
        h.uses -= 1
        if h.uses <= 0:
            h.dev, h.ready = None, None
        return dev


def _dense(t):
    """Whether t's elements fill its storage span without gaps or overlap (then a copy keeps its strides)."""
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


class _ScopeHooks:
    """saved_tensors_hooks for one region invocation (or the forward outside regions): counts its packs and
    offloads those the plan names (`offload(i, t)` says which)."""

    def __init__(self, offloader, offload):
        import torch

        self.offloader, self.offload, self.count = offloader, offload, 0
        self.cm = torch.autograd.graph.saved_tensors_hooks(self._pack, offloader.unpack)

    def _pack(self, t):
        i = self.count
        self.count += 1
        if self.offload(i, t) and not (t.is_leaf and t.requires_grad) and t.numel():
            return self.offloader.pack(t)
        return t

    def __enter__(self):
        self.cm.__enter__()
        return self

    def __exit__(self, *exc):
        return self.cm.__exit__(*exc)


def _sac_contexts(must_save):
    """SAC's context managers for one region invocation: MUST_SAVE for the (op overload, call index) pairs in
    must_save, PREFER_RECOMPUTE for the rest."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    counters = {False: Counter(), True: Counter()}

    def policy(ctx, func, *args, **kwargs):
        name = str(func)
        c = counters[ctx.is_recompute]
        i = c[name]
        c[name] = i + 1
        return CheckpointPolicy.MUST_SAVE if (name, i) in must_save else CheckpointPolicy.PREFER_RECOMPUTE

    # An in-place op's output is cached before autograd bumps its version, so SAC would take it for mutated;
    # plan_policy never saves a call whose outputs a later call writes, so no cached tensor really changes.
    return create_selective_checkpoint_contexts(policy, allow_cache_entry_mutation=True)


def _sac_context(must_save):
    """checkpoint's context_fn: a functools.partial of a module-level function, made before torch.compile traces
    the forward (dynamo accepts a context_fn that is a function or a partial it can guard on, not a closure made
    inside the traced code)."""
    return functools.partial(_sac_contexts, frozenset(must_save))


class AppliedPlan:
    """Installs the plan's wrappers on the model (instance `forward` attributes) and removes them on exit."""

    def __init__(self, policy, model, offload=True, copy=None, host_invisible=False, compiled=False):
        check_model(policy, model)
        self.policy, self.model, self.compiled = policy, model, compiled
        self.offload = offload and not compiled
        self.offloader = OffloadHooks(policy.get("prefetch", 2), copy, host_invisible)
        self.invocations = Counter()
        self.installed = []
        self.by_key = {r["key"]: {i["invocation"]: i for i in r["invocations"]} for r in policy["regions"]}
        self.contexts = {(k, inv): _sac_context({(f, i) for f, i in d.get("must_save", ())})
                         for k, invs in self.by_key.items() for inv, d in invs.items() if d["mode"] == "recompute"}
        glue = policy.get("outside_regions", {}).get("offload_packs", [])
        self.glue = set(glue) if self.offload else set()
        self.any_offload = self.offload and (bool(self.glue) or any(
            i["mode"] == "offload" or i.get("offload_inputs") for r in policy["regions"] for i in r["invocations"]))

    def __enter__(self):
        self.install()
        return self.model

    def __exit__(self, *exc):
        self.remove()
        return False

    def install(self):
        modules = dict(self.model.named_modules())
        segments = {}
        for r in self.policy["regions"]:
            if r["segment"] is None:
                m = modules[r["module"]]
                self._set_forward(m, self._region(r["key"], m.forward, [m]))
            else:
                segments.setdefault(r["module"], []).append(r)
        for path, regs in segments.items():
            seq = modules[path]
            self._set_forward(seq, self._sequential(seq, regs))
        self._set_forward(self.model, self._root(self.model.forward))  # outermost, also around a root's segments
        return self

    def remove(self):
        for m, had, old in reversed(self.installed):
            if had:
                m.forward = old
            else:
                del m.forward
        self.installed = []

    def _set_forward(self, m, fn):
        had = "forward" in m.__dict__
        self.installed.append((m, had, m.__dict__.get("forward")))
        m.forward = fn

    def _root(self, forward):
        def root_forward(*args, **kwargs):
            self.invocations.clear()
            self.offloader.reset()
            scope = (_ScopeHooks(self.offloader, lambda i, t: i in self.glue) if self.any_offload
                     else nullcontext())
            with scope:
                return forward(*args, **kwargs)
        return root_forward

    def _sequential(self, seq, regs):
        children = list(seq)
        starts = {r["segment"][0]: r for r in regs}

        def sequential_forward(x):
            i = 0
            while i < len(children):
                r = starts.get(i)
                if r is None:
                    x = children[i](x)
                    i += 1
                    continue
                part = children[r["segment"][0]:r["segment"][1]]

                def chain(y, part=part):
                    for m in part:
                        y = m(y)
                    return y

                x = self._region(r["key"], chain, part)(x)
                i = r["segment"][1]
            return x
        return sequential_forward

    def _region(self, key, forward, mods):
        import torch
        from torch.utils.checkpoint import checkpoint

        norms = [m for top in mods for m in top.modules() if isinstance(m, torch.nn.modules.batchnorm._NormBase)]

        def region_forward(*args, **kwargs):
            inv = self.invocations[key]
            self.invocations[key] += 1
            d = self.by_key.get(key, {}).get(inv)
            mode = d["mode"] if d else "save"
            if mode == "offload" and self.offload:
                packs = set(d.get("offload_packs", ()))
                scope = _ScopeHooks(self.offloader, lambda i, t: i in packs)
            elif mode in ("recompute", "checkpoint") and self.offload and d.get("offload_inputs"):
                # checkpoint saves its dummy tensor (pack 0), then the positional tensor inputs
                ins = set(d["offload_inputs"])
                scope = _ScopeHooks(self.offloader, lambda i, t: i in ins)
            elif self.any_offload:
                scope = _ScopeHooks(self.offloader, lambda i, t: False)
            else:
                scope = nullcontext()
            with scope:
                if mode not in ("recompute", "checkpoint") or not torch.is_grad_enabled():
                    return forward(*args, **kwargs)
                run = forward if self.compiled else _recompute_aware(forward, mods, norms)
                if mode == "checkpoint":
                    return checkpoint(run, *args, use_reentrant=False, **kwargs)
                return checkpoint(run, *args, use_reentrant=False, context_fn=self.contexts[(key, inv)], **kwargs)
        return region_forward


def _recompute_aware(forward, tops, norms):
    """The region's forward; run again (the recompute in backward) it runs as the forward ran: with the parameters
    and buffers the forward saw (torch.func.functional_call swaps them only while the forward runs, as
    estimate_step does), under the forward's torch function modes (the autograd engine runs backward without
    them: estimate_step's device rules are one), and leaving batch norm's running statistics as the forward left
    them instead of updating them twice."""
    from contextlib import ExitStack

    from torch.nn.utils.stateless import _reparametrize_module
    from torch.overrides import _get_current_function_mode_stack

    calls = [0]
    modes, state = [], []

    def run(*args, **kwargs):
        import torch

        calls[0] += 1
        if calls[0] == 1:
            modes[:] = _get_current_function_mode_stack()
            state[:] = [(top, dict(top.named_parameters(remove_duplicate=False)) |
                         dict(top.named_buffers(remove_duplicate=False))) for top in tops]
            return forward(*args, **kwargs)
        with ExitStack() as stack:
            for top, tensors in state:
                now = dict(top.named_parameters(remove_duplicate=False)) | dict(top.named_buffers(remove_duplicate=False))
                if any(now.get(n) is not t for n, t in tensors.items()):
                    stack.enter_context(_reparametrize_module(top, tensors))
            if not _get_current_function_mode_stack():
                for m in modes:
                    stack.enter_context(m)
            kept = [(b, b.clone()) for m in norms for b in m.buffers(recurse=False)]
            try:
                return forward(*args, **kwargs)
            finally:
                with torch.no_grad():
                    for b, v in kept:
                        b.copy_(v)
    return run
