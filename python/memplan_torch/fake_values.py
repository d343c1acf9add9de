"""The example's values carried beside estimate_step's fake step for the small tensors computed from the inputs, the
buffers and constants alone (a mask from the token ids, position ids from arange), so that a data-dependent read of
one (`.item()`, `.all()`, boolean indexing) is answered with the value a real step would read instead of stopping
the fake step. A read of anything computed from the parameters still stops it (estimate_step then reruns on real
tensors, as before)."""
import weakref

VALUE_NUMEL_LIMIT = 1 << 20  # the largest tensor whose value is carried (elements)


class KnownValues:
    """fake tensor -> its real value, for the tensors every one of whose inputs had a value. A storage written by an
    op that was not computed on values (an input without one, a random op, a tensor over the limit) loses the
    values of every tensor on it. Looked up by id (with a weak reference to tell a reused id): most ops of a step
    have an input without a value, and that must cost little."""

    def __init__(self, fake_mode, limit=VALUE_NUMEL_LIMIT):
        self.fake_mode, self.limit = fake_mode, limit
        self.values = {}       # id(fake tensor) -> (weak reference to it, real value, its storage's key)
        self.on_storage = {}   # storage key -> ids of the fake tensors with values on it
        self.op_info = {}      # OpOverload -> (written argument positions and names, random)
        self.reads_answered = 0

    def seed(self, fake, real):
        """`fake` holds the value of the real tensor `real` (copied)."""
        from torch.utils._python_dispatch import _disable_current_modes

        if real.device.type != "meta" and real.numel() <= self.limit:
            with _disable_current_modes():  # a copy the step does not make
                self._set(fake, real.detach().clone())

    def _set(self, fake, real):
        key = fake.untyped_storage()._cdata
        i = id(fake)
        self._drop(i)
        self.values[i] = (weakref.ref(fake, lambda r, i=i: self._drop(i, r)), real, key)
        self.on_storage.setdefault(key, set()).add(i)

    def _drop(self, i, ref=None):
        entry = self.values.get(i)
        if entry is None or (ref is not None and entry[0] is not ref):
            return
        del self.values[i]
        ids = self.on_storage.get(entry[2])
        if ids is not None:
            ids.discard(i)
            if not ids:
                del self.on_storage[entry[2]]

    def _info(self, func):
        info = self.op_info.get(func)
        if info is None:
            import torch

            written = []
            schema = getattr(func, "_schema", None)
            if schema is not None:
                for i, a in enumerate(schema.arguments):
                    if a.alias_info is not None and a.alias_info.is_write:
                        written.append((i, a.name))
            random = torch.Tag.nondeterministic_seeded in getattr(func, "tags", ())
            info = self.op_info[func] = (tuple(written), random)
        return info

    def _value(self, t):
        entry = self.values.get(id(t))
        if entry is None or entry[0]() is not t:
            return None
        return entry[1]

    def _all_known(self, args, kwargs):
        """Whether every tensor among the arguments (and in their lists) has a value: the cheap test first."""
        import torch

        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.Tensor):
                if self._value(a) is None:
                    return False
            elif isinstance(a, (list, tuple)):
                for x in a:
                    if isinstance(x, torch.Tensor) and self._value(x) is None:
                        return False
        return True

    def _real_args(self, args, kwargs):
        """(args, kwargs) with every tensor replaced by its value, or None when one has none."""
        import torch
        from torch.utils._pytree import tree_map

        if not self._all_known(args, kwargs):
            return None
        return tree_map(lambda a: self._value(a) if isinstance(a, torch.Tensor) else a, (args, kwargs))

    def _compute(self, func, real):
        import torch
        from torch.utils._python_dispatch import _disable_current_modes

        keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
        with _disable_current_modes(), torch._C.DisableTorchFunction(), torch._C._ExcludeDispatchKeyGuard(keys), \
                torch.no_grad():
            return func(*real[0], **real[1])

    def after(self, func, args, kwargs, out):
        """Called after the fake op ran: its outputs' values when every input has one, else its writes lose theirs."""
        if not self.values:
            return
        import torch
        from torch.utils._pytree import tree_leaves

        written, random = self._info(func)
        if not random and self._all_known(args, kwargs):
            outs = tree_leaves(out)
            if all(t.numel() <= self.limit for t in outs if isinstance(t, torch.Tensor)):
                try:
                    got = self._compute(func, self._real_args(args, kwargs))
                except Exception:  # no CPU kernel for it (a CUDA-only op, a dtype): no values from it
                    got = None
                if got is not None:
                    for f, r in zip(outs, tree_leaves(got)):
                        if isinstance(f, torch.Tensor) and isinstance(r, torch.Tensor) and f.shape == r.shape:
                            self._set(f, r)
                    return
        if not written or not self.on_storage:
            return
        for i, name in written:
            v = args[i] if i < len(args) else kwargs.get(name)
            for t in (v if isinstance(v, (list, tuple)) else (v,)):
                if isinstance(t, torch.Tensor):
                    for j in list(self.on_storage.get(t.untyped_storage()._cdata, ())):
                        self._drop(j)

    def answer(self, func, args, kwargs):
        """The op a fake tensor cannot run (its result depends on values) computed on the values, its tensors made
        fake; None when an input has no value."""
        import torch
        from torch.utils._pytree import tree_map

        real = self._real_args(args, kwargs)
        if real is None:
            return None
        got = self._compute(func, real)
        self.reads_answered += 1

        def fake(r):
            if not isinstance(r, torch.Tensor):
                return r
            f = self.fake_mode.from_tensor(r)
            self._set(f, r)
            return f

        return tree_map(fake, got)
