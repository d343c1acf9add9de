"""export_graph: a PyTorch model captured with torch.export, written as memplan's JSON graph."""
import operator
import os
from collections import Counter

from . import aten_extra, aten_moe, aten_nn  # noqa: F401  (register their ops in aten_ops.OPS)
from .aten_complex import COMPLEX_OPS, touches_complex
from .aten_nn import SDPA_OPS
from .aten_ops import OPS, REFUSED
from .convert import Context, UnmappedOps
from .graph_json import INLINE_LIMIT, GraphBuilder, dtype_name

# Ops whose value is random: never folded into constants.
_RANDOM = {"native_dropout", "dropout", "bernoulli", "rand", "randn", "rand_like", "randn_like", "randint",
           "randperm", "normal", "uniform", "exponential", "feature_dropout", "alpha_dropout"}


_FOLD_CREATION_LIMIT = 4096
_FOLD_LIMIT = 1 << 26  # elements of a folded constant at most (its inputs' folds are what is written inline)


def _packet(target):
    p = getattr(target, "_overloadpacket", None)
    if p is not None:
        return p.__name__
    return getattr(target, "__name__", str(target))


def _dynamic_shapes(args, dynamic_dims):
    """torch.export's dynamic_shapes for {input index: {dim: "name"}}: each named dim Dim.AUTO, so that
    torch.export keeps it symbolic where the model allows, bounds it where the model bounds it and specializes
    it where the model specializes it, instead of failing (which export_graph reports in `captured`)."""
    import torch

    if not dynamic_dims:
        return None
    out = []
    for i, a in enumerate(args):
        spec = dynamic_dims.get(i, {}) if isinstance(a, torch.Tensor) else {}
        out.append({d: torch.export.Dim.AUTO for d in spec} or None)
    return tuple(out)


def _data_dependent(e):
    """Whether a torch.export failure comes from a value-dependent size or branch (nonzero, MoE routing, .item())."""
    names = {type(x).__name__ for x in _chain(e)}
    text = " ".join(str(x)[:2000] for x in _chain(e))
    return bool(names & {"GuardOnDataDependentSymNode", "PendingUnbackedSymbolNotFound", "DataDependentOutputException",
                         "UnsupportedOperatorException", "DynamicOutputShapeException"}) or \
        "data-dependent" in text or "unbacked" in text.lower()


def _chain(e):
    seen = []
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


class _TensorOutputs:
    """Wraps a module whose output torch.export cannot flatten (an unregistered output class): its tensors, in
    field order, as a tuple."""

    @staticmethod
    def wrap(model):
        import torch

        class TensorOutputs(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, *a, **k):
                return tuple(_tensors(self.m(*a, **k)))

        return TensorOutputs(model)


def _tensors(v):
    import dataclasses

    import torch

    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, dict) or hasattr(v, "items") and callable(v.items):
        return [t for x in v.values() for t in _tensors(x)]
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in _tensors(x)]
    if dataclasses.is_dataclass(v):
        return [t for f in dataclasses.fields(v) for t in _tensors(getattr(v, f.name))]
    return []


def _export(model, args, kwargs, dyn, info):
    """torch.export.export (non-strict); a data-dependent guard retried with draft_export, which resolves it with
    the example's real values (the graph then holds at the example's sizes there; `info` says so)."""
    import logging

    import torch

    exported = None
    try:
        exported = torch.export.export(model, tuple(args), kwargs=kwargs or None, dynamic_shapes=dyn, strict=False)
        unbacked = _unbacked_symbols(exported)
        if not unbacked:
            return exported
        # sizes read from tensor values (.tolist(), .item()) that torch.export kept as unbacked symbols: memplan
        # plans them at the example's values, which only draft_export records
        info["data_dependent"] = f"sizes from tensor values ({', '.join(unbacked[:4])})"
    except Exception as e:  # noqa: BLE001 - classified below, re-raised when not a data-dependent guard
        if not _data_dependent(e):
            raise
        info["data_dependent"] = f"{type(e).__name__}: {_first_line(e)}"
    quiet = logging.getLogger("torch")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        return torch.export.draft_export(model, tuple(args), kwargs=kwargs or None, dynamic_shapes=dyn, strict=False)
    except Exception:  # noqa: BLE001 - the exported program, whose unbacked sizes the conversion then names
        if exported is None:
            raise
        info.pop("data_dependent", None)
        return exported
    finally:
        quiet.setLevel(level)


def _unbacked_symbols(ep):
    """The unbacked symbols (data-dependent sizes) in the values of `ep`'s nodes, sorted."""
    import torch
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    found = set()
    for node in ep.graph.nodes:
        v = node.meta.get("val")
        vals = v if isinstance(v, (list, tuple)) else [v]
        for x in vals:
            if isinstance(x, (torch.Tensor, torch.SymInt, torch.SymBool, torch.SymFloat)):
                found |= {str(f) for f in free_unbacked_symbols(x)}
    return sorted(found)


def _first_line(e):
    for line in str(e).splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def capture(model, args, kwargs=None, dynamic_dims=None, decompose=True, info=None):
    """torch.export of `model` (in its current train/eval mode) with the core ATen decompositions, keeping the
    ops memplan maps whole (scaled-dot-product attention, linear, layer norm, RMS norm, GELU, SiLU).

    dynamic_dims: {input index: {dim: "name"}}, each as Dim.AUTO (see _dynamic_shapes). Where the export with
    them fails for a reason other than a data-dependent guard, it is retried at the example's sizes (every named
    dim specialized; `info["specialized_why"]` holds the reason). `info` (a dict) collects how it was captured:
    data_dependent (draft_export used), wrapped (outputs flattened), specialized_why."""
    import torch

    info = {} if info is None else info
    dyn = _dynamic_shapes(args, dynamic_dims)
    m = model
    for attempt in range(3):
        try:
            ep = _export(m, args, kwargs, dyn, info)
            break
        except Exception as e:  # noqa: BLE001 - one retry per class of failure, else re-raised
            text = str(e)
            if "in output, which is not a known type" in text and "wrapped" not in info:
                m = _TensorOutputs.wrap(model)
                info["wrapped"] = "m."
                continue
            if dyn is not None and attempt < 2:
                info["specialized_why"] = f"torch.export with them failed: {type(e).__name__}: {_first_line(e)}"
                dyn = None
                continue
            raise
    if not decompose:
        return ep
    table = torch.export.default_decompositions()
    keep = ["scaled_dot_product_attention", "linear", "layer_norm", "native_layer_norm", "rms_norm", "gelu",
            "silu", "silu_", "hardswish", "hardsigmoid", "mish", "softplus", "_fused_rms_norm"]
    for name in keep:
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:
            continue
        for ov in packet.overloads():
            table.pop(getattr(packet, ov), None)
    unbacked = _unbacked_values(ep)
    ep = ep.run_decompositions(table)
    if unbacked:
        info["unbacked"] = unbacked
    return ep


def _unbacked_values(ep):
    """{str(symbol): example value} of the data-dependent sizes draft_export resolved with real tensors."""
    for node in ep.graph.nodes:
        v = node.meta.get("val")
        mode = getattr(v, "fake_mode", None)
        env = getattr(mode, "shape_env", None) if mode is not None else None
        if env is not None:
            vals = getattr(env, "real_tensor_prop_unbacked_vals", None) or {}
            return {str(k): int(x) for k, x in vals.items() if isinstance(x, int) or hasattr(x, "__int__")}
    return {}


def eager_sdpa_calls(model, args, kwargs=None):
    """How PyTorch eager calls F.scaled_dot_product_attention running `model` once (no grad), in call order: per
    call its key/value heads (transformers passes un-repeated grouped-query heads with enable_gqa=True), whether
    a mask is passed, is_causal and the dtype. torch.export's trace may call it otherwise: transformers builds
    an explicit mask and repeats the key/value heads while tracing (masking_utils, sdpa_attention.use_gqa_in_sdpa),
    and which kernel PyTorch's CUDA dispatch runs depends on the eager call (memplan's pytorch_peak_bytes)."""
    import torch
    import torch.nn.functional as F

    calls = []
    original = F.scaled_dot_product_attention

    def record(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, **kw):
        calls.append({"q_heads": int(q.shape[-3]) if q.dim() >= 3 else 1,
                      "kv_heads": int(k.shape[-3]) if k.dim() >= 3 else 1,
                      "mask": attn_mask is not None, "causal": bool(is_causal)})
        return original(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                        enable_gqa=enable_gqa, **kw)

    F.scaled_dot_product_attention = record
    try:
        with torch.no_grad():
            model(*args, **(kwargs or {}))
    finally:
        F.scaled_dot_product_attention = original
    return calls


class Converter:
    """One ExportedProgram -> one GraphBuilder."""

    def __init__(self, ep, name, dynamic_dims, weights_dir=None, rel_dir=None, fused_attention=True, eager_sdpa=None,
                 info=None):
        self.ep = ep
        self.info = info or {}
        self.unbacked = dict(self.info.get("unbacked", {}))  # data-dependent size symbol -> the example's value
        self.prefix = self.info.get("wrapped", "")  # state-dict prefix of a wrapper module, dropped from names
        self.dynamic_names = []   # the dynamic_dims names that stayed symbolic
        self.specialized = []     # those torch.export specialized to the example's size
        self.sym_sources = {}     # str(symbol) -> (input tensor name, axis): where a symbolic int is read
        self._sym_cache = {}
        self.approximated = Counter()  # op -> count: planned at the example's sizes (data-dependent)
        self.eager_sdpa = eager_sdpa  # eager_sdpa_calls(), or None: matched to the graph's SDPA nodes in order
        self.g = GraphBuilder(name)
        self.g.fused_attention = fused_attention
        self._seed = [0]
        self.g.next_seed = self._next_seed
        self.dynamic = False  # set once the inputs show which named dims stayed symbolic
        self.dynamic_dims = dynamic_dims or {}
        self.weights_dir, self.rel_dir = weights_dir, rel_dir
        self.names = {}    # fx node -> memplan tensor name, or list of names (None where not mapped)
        self.known = {}    # fx node -> a concrete torch value (constants and what folds from them)
        self.symbols = {}  # str(sympy expr) -> symbol name
        self.n_weights = 0

    def _next_seed(self):
        self._seed[0] += 1
        return 0x5EED0000 + self._seed[0]

    def dim_of(self, d):
        import torch

        if isinstance(d, torch.SymInt):
            expr = self.concrete_unbacked(d.node.expr)
            if getattr(expr, "is_number", False):
                return int(expr)
            key = str(expr)
            return self.symbols.get(key, key)
        return int(d)

    def concrete_unbacked(self, expr):
        """`expr` with its data-dependent symbols (nonzero's count, routed tokens) replaced by the example's values:
        memplan plans such sizes as they were in the example (recorded in `approximated`)."""
        free = getattr(expr, "free_symbols", set())
        subs = {f: self.unbacked[str(f)] for f in free if str(f) in self.unbacked}
        if not subs:
            return expr
        import sympy

        self.approximated["data-dependent size"] += 1
        return sympy.sympify(expr.xreplace(subs))  # a lone symbol replaced is a Python int

    def sym_value(self, node_or_expr):
        """A symbolic int (sym_size, its arithmetic) as an int64 scalar tensor: its sympy expression written in
        ops over Shape(input) (memplan folds them once --dim binds the symbols)."""
        import torch

        expr = node_or_expr
        if isinstance(node_or_expr, torch.fx.Node):
            v = node_or_expr.meta.get("val")
            if isinstance(v, (int, bool)):
                return self.g.scalar(int(v), "int64", "c")
            if not isinstance(v, (torch.SymInt, torch.SymBool)):
                raise ValueError(f"node '{node_or_expr.name}' ({node_or_expr.target}) is read before it is mapped")
            expr = v.node.expr
        expr = self.concrete_unbacked(expr)
        key = str(expr)
        if key not in self._sym_cache:
            self._sym_cache[key] = self._emit_sym(expr)
        return self._sym_cache[key]

    def _emit_sym(self, expr):
        import sympy

        g = self.g
        if expr.is_number:
            return g.scalar(int(expr), "int64", "c")
        if expr.is_Symbol:
            src = self.sym_sources.get(str(expr))
            if src is None:
                raise ValueError(f"symbolic int {expr} is no input dim of dynamic_dims")
            shape = g.op("Shape", [src[0]], 1, out_base=f"shape_{src[0]}")[0]
            return g.op("Gather", [shape, g.scalar(src[1], "int64", "c")], 1, {"axis": 0}, out_base=str(expr))[0]
        name = type(expr).__name__
        args = [self.sym_value(a) for a in expr.args]
        binary = {"Add": "Add", "Mul": "Mul", "FloorDiv": "Div", "Max": "Max", "Min": "Min", "Mod": "Mod",
                  "PythonMod": "Mod", "CleanDiv": "Div", "IntTrueDiv": "Div"}
        if name in binary:
            y = args[0]
            for a in args[1:]:
                y = g.op(binary[name], [y, a], 1, out_base="sym")[0]
            return y
        if isinstance(expr, sympy.Pow) and expr.args[1].is_Integer and int(expr.args[1]) > 0:
            y = args[0]
            for _ in range(int(expr.args[1]) - 1):
                y = g.op("Mul", [y, args[0]], 1, out_base="sym")[0]
            return y
        raise ValueError(f"symbolic int {expr} ({name}) is not mapped")

    def tensor_of(self, node):
        import torch

        if not isinstance(node, torch.fx.Node):
            raise ValueError(f"expected a tensor, got {node!r}")
        if node not in self.names and isinstance(node.meta.get("val"), (torch.SymInt, torch.SymBool)):
            return self.sym_value(node)
        if node in self.names:
            n = self.names[node]
            if n is None or isinstance(n, list):
                raise ValueError(f"node '{node.name}' ({node.target}) has no single tensor value in the memplan graph")
            return n
        if node in self.known:
            return self._emit_known(node)
        raise ValueError(f"node '{node.name}' ({node.target}) is read before it is mapped")

    def _emit_known(self, node):
        import torch

        v = self.known[node].detach().cpu().contiguous()
        if v.is_complex():  # complex values as real ones with a trailing axis of 2 (aten_complex)
            v = torch.view_as_real(v).contiguous()
        packet = _packet(node.target) if node.op == "call_function" else None
        if v.numel() > INLINE_LIMIT and packet is not None and _table(node).get(packet) is not None:
            # too large to write inline (a mask expanded to the batch): the op itself, over its folded inputs
            try:
                out = _table(node)[packet](Context(self, node))
            except (ValueError, KeyError, IndexError, TypeError) as e:
                raise ValueError(f"node '{node.name}' ({node.target}): {e}") from e
            self.names[node] = out
            return out
        if v.numel() > INLINE_LIMIT:
            raise ValueError(f"constant '{node.name}' has {v.numel()} elements, more than the {INLINE_LIMIT} "
                             "written inline")
        dt = dtype_name(v.dtype)
        flat = v.reshape(-1)
        data = flat.to(_wide(v.dtype)).tolist()
        name = self.g.const(data, dt, list(v.shape), base=node.name)
        self.names[node] = name
        return name

    # --- inputs: user inputs, parameters, buffers, constants
    def _placeholders(self):
        import torch
        from torch.export.graph_signature import InputKind

        sig = self.ep.graph_signature
        mutated = set(sig.buffers_to_mutate.values()) if hasattr(sig, "buffers_to_mutate") else set()
        consts = dict(self.ep.constants)
        state = self.ep.state_dict
        user_i = 0
        by_name = {n.name: n for n in self.ep.graph.nodes if n.op == "placeholder"}
        for spec in sig.input_specs:
            node = by_name[spec.arg.name]
            val = node.meta.get("val")
            if spec.kind == InputKind.USER_INPUT:
                if not isinstance(val, torch.Tensor):
                    user_i += 1
                    continue
                name = self.g.fresh(node.name)
                for d, sym in self.dynamic_dims.get(user_i, {}).items():
                    dim = val.shape[d]
                    if isinstance(dim, torch.SymInt) and dim.node.expr.is_Symbol:
                        self.symbols.setdefault(str(dim.node.expr), sym)
                        self.sym_sources.setdefault(str(dim.node.expr), (name, d))
                    elif sym not in self.specialized:
                        self.specialized.append(sym)
                shape = [self.dim_of(d) for d in val.shape]
                for d in shape:
                    if isinstance(d, str) and d not in self.symbols.values():
                        raise ValueError(f"input '{node.name}' has dim {d}, which is no symbol of dynamic_dims")
                    if isinstance(d, str) and d not in self.dynamic_names:
                        self.dynamic_names.append(d)
                self.dynamic = bool(self.dynamic_names)
                name = self.g.tensor(name, dtype_name(val.dtype), shape, "input")
                self.g.inputs.append(name)
                self.names[node] = name
                user_i += 1
                continue
            target = spec.target
            value = state.get(target) if target in state else consts.get(target)
            if spec.kind == InputKind.PARAMETER:
                self.names[node] = self._weight(target, val, value, inline=False)
            elif spec.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                if value is not None and target not in mutated and spec.kind == InputKind.CONSTANT_TENSOR:
                    self.known[node] = value
                else:
                    # Buffers (running statistics, rotary frequencies) carry their values: never trained.
                    self.names[node] = self._weight(target, val, value, inline=True)
                    if value is not None and target not in mutated:
                        self.known[node] = value
            else:
                raise ValueError(f"input '{node.name}' of kind {spec.kind} is not supported")

    def _weight(self, target, val, value, inline):
        g = self.g
        if self.prefix and target.startswith(self.prefix):
            target = target[len(self.prefix):]
        name = g.fresh(target)
        dt = dtype_name(val.dtype)
        shape = list(val.shape)
        if inline and value is not None and value.numel() <= INLINE_LIMIT:
            v = value.detach().cpu().contiguous().reshape(-1)
            data = [x for x in v.to(_wide(v.dtype)).tolist()]
            from .graph_json import FLOAT_DTYPES, _value
            return g.tensor(name, dt, shape, "weight", [_value(x, dt in FLOAT_DTYPES) for x in data])
        ext = None
        if self.weights_dir is not None and value is not None:
            fname = f"w{self.n_weights:05d}.bin"
            self.n_weights += 1
            raw = value.detach().cpu().contiguous().reshape(-1).view(_u8()).numpy().tobytes()
            with open(os.path.join(self.weights_dir, fname), "wb") as f:
                f.write(raw)
            ext = f"{self.rel_dir}/{fname}"
        return g.tensor(name, dt, shape, "weight", None, ext)

    # --- the ops
    def _needed(self):
        outs = self._user_outputs()
        need, stack = set(), list(outs)
        while stack:
            n = stack.pop()
            if n in need:
                continue
            need.add(n)
            stack.extend(n.all_input_nodes)
        return need

    def _user_outputs(self):
        from torch.export.graph_signature import OutputKind

        out_node = next(n for n in self.ep.graph.nodes if n.op == "output")
        flat = list(out_node.args[0])
        specs = self.ep.graph_signature.output_specs
        return [flat[i] for i, s in enumerate(specs) if s.kind == OutputKind.USER_OUTPUT]

    def _fold(self, node):
        """Evaluates `node` when every input is a known constant (masks, rotary tables, position ids)."""
        import torch

        if _packet(node.target) in _RANDOM or not all(i in self.known for i in node.all_input_nodes):
            return False
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or any(not isinstance(d, int) for d in val.shape):
            return False
        if not node.all_input_nodes and _packet(node.target) in OPS and val.numel() > _FOLD_CREATION_LIMIT:
            return False  # a large fill (zeros, full, empty) stays an op: no constant of its size inline
        if val.numel() > _FOLD_LIMIT and _packet(node.target) in OPS:
            return False  # evaluating it would hold a tensor of the model's activation sizes in this process
        try:
            args = torch.fx.node.map_arg(node.args, lambda n: self.known[n])
            kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: self.known[n])
            kwargs = {k: (torch.device("cpu") if k == "device" else v) for k, v in kwargs.items()}
            self.known[node] = node.target(*args, **kwargs)
            return isinstance(self.known[node], torch.Tensor)
        except Exception:
            self.known.pop(node, None)
            return False

    def unmapped(self, need):
        import torch

        counts = Counter()
        for node in self.ep.graph.nodes:
            if node.op != "call_function" or node not in need or node.target is operator.getitem:
                continue
            val = node.meta.get("val")
            if not isinstance(val, (torch.Tensor, tuple, list)):
                continue  # symbolic ints (sym_size) and other non-tensor values
            if _table(node).get(_packet(node.target)) is None and not self._fold(node):
                counts[str(node.target)] += 1
        return counts

    def run(self):
        import torch

        self._placeholders()
        need = self._needed()
        counts = self.unmapped(need)
        if counts:
            raise UnmappedOps(counts, {k: REFUSED[_packet_of_name(k)] for k in counts if _packet_of_name(k) in REFUSED})
        sdpa = [n for n in self.ep.graph.nodes if n.op == "call_function" and n in need and
                _packet(n.target) in SDPA_OPS]
        # The eager calls name the graph's SDPA nodes only when they are as many (the same forward, in order).
        self.eager_sdpa = dict(zip(sdpa, self.eager_sdpa)) if self.eager_sdpa and len(self.eager_sdpa) == len(sdpa) else {}
        for node in self.ep.graph.nodes:
            if node.op != "call_function" or node not in need or node in self.known:
                continue
            if node.target is operator.getitem:
                src = self.names.get(node.args[0])
                if isinstance(src, list):
                    self.names[node] = src[node.args[1]]
                elif node.args[0] in self.known:
                    self.known[node] = self.known[node.args[0]][node.args[1]]
                continue
            val = node.meta.get("val")
            if not isinstance(val, (torch.Tensor, tuple, list)):
                continue
            if self._fold(node):
                continue
            try:
                out = _table(node)[_packet(node.target)](Context(self, node))
            except (ValueError, KeyError, IndexError, TypeError) as e:
                raise ValueError(f"node '{node.name}' ({node.target}): {e}") from e
            self.names[node] = out
        self._outputs()
        return self.g

    def _outputs(self):
        g = self.g
        seen = set()
        for k, node in enumerate(self._user_outputs()):
            name = self.tensor_of(node)
            t = g.tensors[name]
            if name in seen or "role" in t or name in g.inputs:
                name = g.op("Identity", [name], 1, name=f"output_{k}", out_base=f"output_{k}")[0]
            seen.add(name)
            g.outputs.append(name)


def _table(node):
    """The op table for `node`: complex tensors (as real ones with a trailing axis of 2) have their own; a refused
    op maps to None."""
    if touches_complex(node):
        return COMPLEX_OPS
    return {} if _packet(node.target) in REFUSED else OPS


def _has_symbols(ep):
    import torch

    for node in ep.graph.nodes:
        v = node.meta.get("val")
        if node.op == "placeholder" and isinstance(v, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in v.shape):
            return True
    return False


def _packet_of_name(target_name):
    """'aten.sort.default' -> 'sort'."""
    parts = target_name.split(".")
    return parts[1] if len(parts) >= 2 else target_name


def _wide(dtype):
    import torch

    return torch.float64 if dtype.is_floating_point else (torch.bool if dtype == torch.bool else torch.int64)


def _u8():
    import torch

    return torch.uint8


def export_graph(model, example_inputs, path, train=True, dynamic_dims=None, weights=False, name=None,
                 fused_attention=True, example_kwargs=None):
    """Captures `model` with torch.export and writes memplan's JSON graph to `path`.

    train: capture in training mode (batch norm with batch statistics, dropout kept) for `memplan plan --train`;
        False captures eval mode. The model's own mode is restored afterwards.
    dynamic_dims: {input index: {dim: "symbol"}} asks for dims to stay dynamic. Each is torch.export.Dim.AUTO:
        torch.export keeps it symbolic where the model allows (written as a memplan symbolic dim, bound with
        `--dim symbol=N`) and specializes it to the example's size where the model's code does; neither fails.
        Where the export with them fails otherwise, the model is exported at the example's sizes. Ops whose
        memplan form needs concrete shapes (FusedAttention, RMSNormalization) are then written decomposed, which
        memplan's fusion passes turn back into the fused ops once the dims are bound. Without dynamic_dims the
        graph has the example's sizes.
    weights: also write the parameters (raw little-endian files in PATH.weights/, named by external_location),
        so that `memplan run` computes with them.
    fused_attention: scaled_dot_product_attention as memplan::FusedAttention (else the decomposed form).
    Raises UnmappedOps listing every ATen op without a mapping (or refused, aten_ops.REFUSED, with the reason),
    with its count. Returns the graph document, plus (not written to the file) `captured`: {"dynamic": names
    that stayed symbolic, "specialized": names fixed at the example's size, "specialized_why": why, when the
    export itself needed it, "approximated": what is planned at the example's sizes (data-dependent sizes:
    nonzero, MoE routing) }. A warning names each specialized dim and each approximation.
    """
    import warnings

    args = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    was_training = model.training
    model.train(train)
    info = {}
    try:
        ep = capture(model, args, example_kwargs, dynamic_dims, info=info)
        try:
            eager = eager_sdpa_calls(model, args, example_kwargs) if fused_attention else None
        except (RuntimeError, MemoryError):
            # the eager forward only tells how PyTorch calls SDPA; one that does not fit this host's memory
            # leaves the graph's own calls
            eager = None
    finally:
        model.train(was_training)
    try:
        doc, conv = write_program(ep, path, dynamic_dims, weights, name or type(model).__name__, fused_attention,
                                  eager, info=info, converter=True)
    except UnmappedOps:
        raise
    except ValueError as e:
        if not dynamic_dims or not _has_symbols(ep):
            raise
        # an op memplan writes only with concrete sizes: the graph at the example's sizes, the dims reported
        info = {"specialized_why": f"memplan needs concrete sizes at {_first_line(e)}"}
        model.train(train)
        try:
            ep = capture(model, args, example_kwargs, None, info=info)
        finally:
            model.train(was_training)
        doc, conv = write_program(ep, path, dynamic_dims, weights, name or type(model).__name__, fused_attention,
                                  eager, info=info, converter=True)
    requested = []
    for spec in (dynamic_dims or {}).values():
        requested += [s for s in spec.values() if s not in requested]
    specialized = [s for s in requested if s not in conv.dynamic_names]
    approximated = []
    if info.get("data_dependent"):
        approximated.append(f"data-dependent: {info['data_dependent']}")
    approximated += [f"{op} x{n}" for op, n in sorted(conv.approximated.items())]
    captured = {"dynamic": list(conv.dynamic_names), "specialized": specialized, "approximated": approximated}
    if info.get("specialized_why"):
        captured["specialized_why"] = info["specialized_why"]
    if specialized:
        why = info.get("specialized_why") or "the model's code fixes them (torch.export specialized them)"
        warnings.warn(f"memplan_torch.export_graph: dims {specialized} are planned at the example's sizes: {why}",
                      stacklevel=2)
    if approximated:
        warnings.warn("memplan_torch.export_graph: planned at the example's sizes, not exactly: "
                      + "; ".join(approximated), stacklevel=2)
    doc["captured"] = captured
    return doc


def write_program(ep, path, dynamic_dims=None, weights=False, name="model", fused_attention=True, eager_sdpa=None,
                  info=None, converter=False):
    """An ExportedProgram written as memplan's JSON graph (see export_graph); with converter=True also the
    Converter (what stayed dynamic, what was approximated)."""
    path = str(path)
    weights_dir = rel = None
    if weights:
        stem = os.path.splitext(os.path.basename(path))[0]
        rel = stem + ".weights"
        weights_dir = os.path.join(os.path.dirname(os.path.abspath(path)), rel)
        os.makedirs(weights_dir, exist_ok=True)
    conv = Converter(ep, name, dynamic_dims, weights_dir, rel, fused_attention, eager_sdpa, info)
    g = conv.run()
    g.write(path)
    return (g.document(), conv) if converter else g.document()
