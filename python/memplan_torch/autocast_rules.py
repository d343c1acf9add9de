"""CUDA autocast as PyTorch runs it, on tensors that are not CUDA tensors (estimate_step's fake step).

PyTorch's CUDA autocast casts only CUDA tensors, and a training step cannot run on fake CUDA tensors without a GPU
(the autograd engine needs a CUDA context). estimate_step therefore runs on fake CPU tensors and gives the CPU
autocast dispatch key CUDA's cast policies: each op of PyTorch's CUDA lists gets a kernel at AutocastCPU with its
CUDA policy, and each op that only the CPU lists name is passed through. The lists are read from the installed
PyTorch's own header (ATen/autocast_mode.h: AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32, ...), so they match the
PyTorch that runs; python/memplan_torch/autocast_cuda_table.py is the same table generated from PyTorch 2.11 by
scripts/gen_torch_tables.py, used when the headers are not installed.
"""
import os
import re
import weakref

POLICIES = ("lower_precision_fp", "fp32", "fp32_set_opt_dtype", "fp32_append_dtype", "promote")
_MACROS = {"AT_FORALL_LOWER_PRECISION_FP": "lower_precision_fp", "AT_FORALL_FP32": "fp32",
           "AT_FORALL_FP32_SET_OPT_DTYPE": "fp32_set_opt_dtype",
           "AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE": "fp32_append_dtype", "AT_FORALL_PROMOTE": "promote"}


def parse_autocast_header(text):
    """{policy: [(op, overload), ...]} from the text of ATen/autocast_mode.h."""
    out = {p: [] for p in POLICIES}
    for macro, policy in _MACROS.items():
        m = re.search(r"#define\s+" + macro + r"\(_\)((?:[^\n]*\\\n)*[^\n]*)", text)
        if not m:
            raise ValueError(f"autocast header has no {macro}")
        body = m.group(1).replace("\\\n", "\n")
        if policy == "fp32_append_dtype":
            for name, overload in re.findall(r"ADD_NS\((\w+)\),\s*\"\w+\.(\w+)\"", body):
                out[policy].append((name, overload))
            continue
        for entry in re.findall(r"_\(([^)]*)\)", body):
            parts = [p.strip() for p in entry.split(",")]
            out[policy].append((parts[0], parts[1] if len(parts) > 1 else ""))
    # Registered in autocast_mode.cpp beside the macros: the CUDA-only cuDNN convolutions (never reached off CUDA)
    # and binary_cross_entropy, which CUDA autocast refuses.
    out["banned"] = [("binary_cross_entropy", "")]
    return out


def cuda_autocast_lists(torch_module=None):
    """The CUDA autocast lists of the installed PyTorch (its header), else the generated table."""
    import torch

    header = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "autocast_mode.h")
    if os.path.isfile(header):
        with open(header, encoding="utf-8") as f:
            return parse_autocast_header(f.read())
    from .autocast_cuda_table import CUDA_AUTOCAST

    return {k: [tuple(x) for x in v] for k, v in CUDA_AUTOCAST.items()}


def _cpu_autocast_ops():
    """ATen ops with an AutocastCPU kernel in this PyTorch (CPU's lists), as 'name.overload' strings."""
    import torch

    names = []
    for schema in torch._C._jit_get_all_schemas():
        full = schema.name + ("." + schema.overload_name if schema.overload_name else "")
        if not schema.name.startswith("aten::"):
            continue
        try:
            if torch._C._dispatch_has_kernel_for_dispatch_key(full, "AutocastCPU"):
                names.append(full[len("aten::"):])
        except RuntimeError:  # a schema the JIT knows that the dispatcher does not register
            continue
    return sorted(set(names))


class CudaAutocastOnCpu:
    """While entered (and CPU autocast enabled at `dtype`), CPU-key tensors are autocast with CUDA's policies."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.lib = None
        self.cache = {}  # id(fp32 leaf weight) -> (weakref to it, its cast): autocast's weight-cast cache

    def __enter__(self):
        import torch

        lists = cuda_autocast_lists()
        self.lib = torch.library.Library("aten", "IMPL")
        covered = set()
        for policy, ops in lists.items():
            for name, overload in ops:
                full = name + ("." + overload if overload else "")
                packet = getattr(torch.ops.aten, name, None)
                if packet is None:
                    continue
                op = getattr(packet, overload or "default", None)
                if op is None:
                    continue
                self._register(full, op, policy)
                covered.add(full)
        for full in _cpu_autocast_ops():
            if full in covered:
                continue
            name, _, overload = full.partition(".")
            op = getattr(getattr(torch.ops.aten, name), overload or "default")
            self._register(full, op, "passthrough")
        return self

    def __exit__(self, *exc):
        if self.lib is not None:
            self.lib._destroy()
            self.lib = None
        self.cache.clear()

    def clear_cache(self):
        self.cache.clear()

    def _register(self, full, op, policy):
        import warnings

        import torch

        # an op only CPU autocast names falls through, as it does under CUDA autocast: a composite's own ops
        # (cross_entropy_loss's log_softmax and nll_loss) then meet their CUDA policies
        kernel = torch.library.fallthrough_kernel if policy == "passthrough" else self._kernel(op, policy)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "overriding a previously registered kernel": that is the point
            self.lib.impl(full, kernel, "AutocastCPU")

    def _kernel(self, op, policy):
        import torch
        from torch.utils._pytree import tree_map

        keyset = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
        low = self.dtype
        names = [a.name for a in op._schema.arguments]
        dtype_at = names.index("dtype") if "dtype" in names else None

        def eligible(t):
            return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64

        def cast_to(dtype):
            def f(t):
                if not eligible(t) or t.dtype == dtype:
                    return t
                if (dtype == low and t.dtype == torch.float32 and t.requires_grad and t.is_leaf
                        and not t._is_view()):
                    hit = self.cache.get(id(t))
                    if hit is not None and hit[0]() is t:
                        return hit[1]
                    c = t.to(dtype)
                    self.cache[id(t)] = (weakref.ref(t), c)
                    return c
                return t.to(dtype)
            return f

        def kernel(*args, **kwargs):
            with torch._C._ExcludeDispatchKeyGuard(keyset):
                if policy == "banned":
                    raise RuntimeError(f"{op} is unsafe to autocast (CUDA autocast refuses it)")
                if policy == "lower_precision_fp":
                    args, kwargs = tree_map(cast_to(low), (args, kwargs))
                elif policy in ("fp32", "fp32_append_dtype"):
                    args, kwargs = tree_map(cast_to(torch.float32), (args, kwargs))
                elif policy == "fp32_set_opt_dtype":
                    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
                    given = kwargs.get("dtype")
                    if dtype_at is not None and len(args) > dtype_at:
                        given = args[dtype_at]
                    if given is None and eligible(first) and first.dtype != torch.float32:
                        if dtype_at is not None and len(args) > dtype_at:
                            args = args[:dtype_at] + (torch.float32,) + args[dtype_at + 1:]
                        else:
                            kwargs = dict(kwargs, dtype=torch.float32)
                elif policy == "promote":
                    widest = None
                    for t in tree_leaves((args, kwargs)):
                        if eligible(t):
                            widest = t.dtype if widest is None else torch.promote_types(widest, t.dtype)
                    if widest is not None:
                        args, kwargs = tree_map(cast_to(widest), (args, kwargs))
                return op(*args, **kwargs)

        from torch.utils._pytree import tree_leaves

        return kernel
