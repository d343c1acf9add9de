"""export_graph: a PyTorch model captured with torch.export, written as memplan's JSON graph."""
import operator
import os
from collections import Counter

from . import aten_nn  # noqa: F401  (registers the nn ops in aten_ops.OPS)
from .aten_nn import SDPA_OPS
from .aten_ops import OPS
from .convert import Context, UnmappedOps
from .graph_json import INLINE_LIMIT, GraphBuilder, dtype_name

# Ops whose value is random: never folded into constants.
_RANDOM = {"native_dropout", "dropout", "bernoulli", "rand", "randn", "rand_like", "randn_like", "randint",
           "randperm", "normal", "uniform", "feature_dropout", "alpha_dropout"}


def _packet(target):
    p = getattr(target, "_overloadpacket", None)
    if p is not None:
        return p.__name__
    return getattr(target, "__name__", str(target))


def capture(model, args, kwargs=None, dynamic_dims=None, decompose=True):
    """torch.export of `model` (in its current train/eval mode) with the core ATen decompositions, keeping the
    ops memplan maps whole (scaled-dot-product attention, linear, layer norm, RMS norm, GELU, SiLU)."""
    import torch

    dyn = None
    if dynamic_dims:
        dims = {}
        dyn = []
        for i in range(len(args)):
            spec = dynamic_dims.get(i, {})
            dyn.append({d: dims.setdefault(s, torch.export.Dim(s, min=2)) for d, s in spec.items()} or None)
        dyn = tuple(dyn)
    ep = torch.export.export(model, tuple(args), kwargs=kwargs or None, dynamic_shapes=dyn, strict=False)
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
    return ep.run_decompositions(table)


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

    def __init__(self, ep, name, dynamic_dims, weights_dir=None, rel_dir=None, fused_attention=True, eager_sdpa=None):
        self.ep = ep
        self.eager_sdpa = eager_sdpa  # eager_sdpa_calls(), or None: matched to the graph's SDPA nodes in order
        self.g = GraphBuilder(name)
        self.g.fused_attention = fused_attention
        self._seed = [0]
        self.g.next_seed = self._next_seed
        self.dynamic = bool(dynamic_dims)
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
            expr = d.node.expr
            if getattr(expr, "is_number", False):
                return int(expr)
            key = str(expr)
            return self.symbols.get(key, key)
        return int(d)

    def tensor_of(self, node):
        import torch

        if not isinstance(node, torch.fx.Node):
            raise ValueError(f"expected a tensor, got {node!r}")
        if node in self.names:
            n = self.names[node]
            if n is None or isinstance(n, list):
                raise ValueError(f"node '{node.name}' ({node.target}) has no single tensor value in the memplan graph")
            return n
        if node in self.known:
            return self._emit_known(node)
        raise ValueError(f"node '{node.name}' ({node.target}) is read before it is mapped")

    def _emit_known(self, node):
        v = self.known[node].detach().cpu().contiguous()
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
                for d, sym in self.dynamic_dims.get(user_i, {}).items():
                    self.symbols[str(val.shape[d].node.expr)] = sym
                shape = [self.dim_of(d) for d in val.shape]
                for d in shape:
                    if isinstance(d, str) and d not in self.symbols.values():
                        raise ValueError(f"input '{node.name}' has dim {d}, which is no symbol of dynamic_dims")
                name = self.g.tensor(self.g.fresh(node.name), dtype_name(val.dtype), shape, "input")
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
            if _packet(node.target) not in OPS and not self._fold(node):
                counts[str(node.target)] += 1
        return counts

    def run(self):
        import torch

        self._placeholders()
        need = self._needed()
        counts = self.unmapped(need)
        if counts:
            raise UnmappedOps(counts)
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
                out = OPS[_packet(node.target)](Context(self, node))
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
    dynamic_dims: {input index: {dim: "symbol"}} marks dims dynamic (torch.export.Dim); they are written as
        memplan symbolic dims, bound with `--dim symbol=N`. Ops whose memplan form needs concrete shapes
        (FusedAttention, RMSNormalization) are then written in their decomposed form, which memplan's fusion
        passes turn back into the fused ops once the dims are bound.
    weights: also write the parameters (raw little-endian files in PATH.weights/, named by external_location),
        so that `memplan run` computes with them.
    fused_attention: scaled_dot_product_attention as memplan::FusedAttention (else the decomposed form).
    Raises UnmappedOps listing every ATen op without a mapping, with its count. Returns the graph document.
    """
    args = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    was_training = model.training
    model.train(train)
    try:
        ep = capture(model, args, example_kwargs, dynamic_dims)
        eager = eager_sdpa_calls(model, args, example_kwargs) if fused_attention else None
    finally:
        model.train(was_training)
    return write_program(ep, path, dynamic_dims, weights, name or type(model).__name__, fused_attention, eager)


def write_program(ep, path, dynamic_dims=None, weights=False, name="model", fused_attention=True, eager_sdpa=None):
    """An ExportedProgram written as memplan's JSON graph (see export_graph)."""
    path = str(path)
    weights_dir = rel = None
    if weights:
        stem = os.path.splitext(os.path.basename(path))[0]
        rel = stem + ".weights"
        weights_dir = os.path.join(os.path.dirname(os.path.abspath(path)), rel)
        os.makedirs(weights_dir, exist_ok=True)
    conv = Converter(ep, name, dynamic_dims, weights_dir, rel, fused_attention, eager_sdpa)
    g = conv.run()
    g.write(path)
    return g.document()
