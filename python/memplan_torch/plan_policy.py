"""plan_step's choices over a captured step: the checkpoint regions (the model's repeated blocks, or runs of an
nn.Sequential's layers), what each op call saves that a region could give back, and the ladder of actions
(recompute the cheapest bytes first, pointwise and norm ops before matmuls as the min-cut partitioner prefers,
then offload) from which plan_step takes the shortest prefix whose verified peak meets the budget."""
import math
from collections import Counter, defaultdict
from dataclasses import dataclass

from .plan_capture import COMPUTE_INTENSIVE

# Roofline speeds per GPU (dense bf16/fp16 and fp32 tensor throughput a large GEMM reaches, HBM bandwidth, one kernel
# launch) and the pinned host link an offload copy crosses; used only to order the recompute choices.
GPU_SPEEDS = {
    "h100": {"flops_low": 700e12, "flops_fp32": 50e12, "hbm_bytes_per_s": 3.0e12, "launch_s": 4e-6,
             "host_bytes_per_s": 25e9},
    "h200": {"flops_low": 700e12, "flops_fp32": 50e12, "hbm_bytes_per_s": 4.3e12, "launch_s": 4e-6,
             "host_bytes_per_s": 25e9},
}
CONTAINERS = ("Sequential", "ModuleList", "ModuleDict")


@dataclass(frozen=True)
class Region:
    """A checkpoint region: a module (`start` None) or the children start..end-1 of an nn.Sequential."""
    module: str
    start: int = None
    end: int = None

    @property
    def key(self):
        return self.module if self.start is None else f"{self.module}[{self.start}:{self.end}]"


@dataclass
class Action:
    kind: str          # "recompute" (an op call's saved outputs), "offload_inputs" (a checkpointed region's
    #                    inputs), "offload" (the saved tensors of a region or of the forward outside regions)
    scope: tuple       # (region key, invocation) or ("", 0) for the forward outside regions
    call: int          # the OpCall (recompute) or -1
    nbytes: int
    seconds: float


def choose_regions(cap, model):
    """The repeated composite blocks (two or more children of one class that are neither containers nor leaves),
    else runs of an nn.Sequential's leaf layers of about sqrt(n) each; searched from the root down."""
    saved = _saved_bytes_by_module(cap)
    types = {path: type(m).__name__ for path, m in model.named_modules()}
    regions = []

    def fill(path):  # containers that are never called (ModuleList) hold what their children hold
        below = sum([fill(k) for k in cap.module_children.get(path, [])])
        saved.setdefault(path, below)
        return saved[path]

    fill("")

    def composite(path):
        return bool(cap.module_children.get(path)) and types.get(path) not in CONTAINERS

    def visit(path):
        if not saved.get(path):
            return
        kids = cap.module_children.get(path, [])
        counts = Counter(types[k] for k in kids if composite(k) and saved.get(k))
        blocks = {t for t, n in counts.items() if n >= 2}
        if blocks:
            for k in kids:
                if types[k] in blocks and saved.get(k):
                    regions.append(Region(k))
                else:
                    visit(k)
            return
        if path in cap.sequential and sum(1 for k in kids if saved.get(k)) >= 2:
            _segments(path, kids, saved, composite, regions, visit)
            return
        for k in kids:
            visit(k)

    visit("")
    return regions


def _segments(path, kids, saved, composite, regions, visit):
    total = sum(saved.get(k, 0) for k in kids)
    n = sum(1 for k in kids if saved.get(k))
    limit = total / max(1, round(math.sqrt(n)))
    run, run_bytes = [], 0

    def close():
        nonlocal run, run_bytes
        if len(run) >= 2 and run_bytes:
            regions.append(Region(path, run[0], run[-1] + 1))
        run, run_bytes = [], 0

    for i, k in enumerate(kids):
        if composite(k) and saved.get(k, 0) > limit:
            close()
            visit(k)
            continue
        run.append(i)
        run_bytes += saved.get(k, 0)
        if run_bytes >= limit:
            close()
    close()


def _saved_bytes_by_module(cap):
    """Bytes of the distinct saved storages each module's calls made (parameters and inputs excluded)."""
    out = defaultdict(int)
    seen = set()
    for p in cap.packs:
        s = p.storage
        if s in seen or s in cap.fixed or s not in cap.owner:
            continue
        seen.add(s)
        paths = {""} | {path for path, _ in cap.calls[cap.owner[s]].stack}
        for path in paths:
            out[path] += cap.storage_bytes[s]
    return out


def membership(region, stack):
    """The invocation of `region` that a call or pack with this module stack falls in, or None."""
    for i, (path, inv) in enumerate(stack):
        if region.start is None:
            if path == region.module:
                return inv
        elif path == region.module and i + 1 < len(stack):
            child = stack[i + 1][0]
            idx = _child_index(region.module, child)
            return inv if region.start <= idx < region.end else None
    return None


def _child_path(parent, index):
    return f"{parent}.{index}" if parent else str(index)


def _parent_invocation(cap, region, child_inv):
    """The Sequential's invocation in which its child region.start ran for the child_inv-th time."""
    child = _child_path(region.module, region.start)
    for c in cap.calls:
        for i, (path, inv) in enumerate(c.stack):
            if path == child and inv == child_inv and i > 0:
                return c.stack[i - 1][1]
    return child_inv


def _child_index(parent, child):
    name = child[len(parent) + 1:] if parent else child
    return int(name) if name.isdigit() else -1


@dataclass
class Scopes:
    """Per call and per pack: the (region key, invocation) it falls in, or ("", 0) outside every region."""
    call_scope: list
    pack_scope: list
    pack_index: list       # a pack's position among its scope's packs
    candidates: dict       # scope -> {call: [storage ids]} saved, made in the scope and used only inside it
    escaping_saved: dict   # scope -> {calls whose saved outputs are also used after the scope}
    inputs: dict           # scope -> {pack index of checkpoint's input saver: bytes} for the positional
    #                        tensor inputs the forward made (the step's own inputs stay with the caller)
    input_storages: dict = None  # scope -> {pack index of checkpoint's input saver: storage id}: the region's own
    #                              positional tensors (what the offload hooks of `inputs`' pack indices take)


def analyze(cap, regions):
    def scope_of(stack):
        for r in regions:
            inv = membership(r, stack)
            if inv is not None:
                return (r.key, inv)
        return ("", 0)

    call_scope = [scope_of(c.stack) for c in cap.calls]
    pack_scope = [scope_of(p.stack) for p in cap.packs]
    counter = Counter()
    pack_index = []
    for sc in pack_scope:
        pack_index.append(counter[sc])
        counter[sc] += 1
    last_use = {}  # storage -> the scopes that read it, in order
    for c in cap.calls:
        for s in c.reads:
            last_use.setdefault(s, set()).add(call_scope[c.index])
    saved_in = defaultdict(set)
    for p, sc in zip(cap.packs, pack_scope):
        saved_in[p.storage].add(sc)
    candidates = defaultdict(lambda: defaultdict(list))
    escaping = defaultdict(set)
    inputs = defaultdict(int)
    input_storages = {}
    for s, scopes in saved_in.items():
        if s in cap.fixed or s not in cap.owner:
            continue
        owner = cap.owner[s]
        sc = call_scope[owner]
        if sc[0] == "":
            continue
        used_outside = s in cap.outputs or any(u != sc for u in last_use.get(s, ())) or scopes != {sc}
        if used_outside:
            if sc in scopes:
                escaping[sc].add(owner)
        else:
            candidates[sc][owner].append(s)
    for r in regions:
        for (path, inv), args in cap.module_args.items():
            first = path if r.start is None else _child_path(r.module, r.start)
            if path != first:
                continue
            sc = (r.key, inv if r.start is None else _parent_invocation(cap, r, inv))
            inputs[sc] = {j + 1: cap.storage_bytes[s] for j, s in enumerate(args)
                          if s in cap.owner and s not in cap.fixed}
        first = r.module if r.start is None else _child_path(r.module, r.start)
        for (path, inv), args in cap.module_args.items():
            if path == first:
                sc = (r.key, inv if r.start is None else _parent_invocation(cap, r, inv))
                input_storages[sc] = {j + 1: s for j, s in enumerate(args)}
    return Scopes(call_scope, pack_scope, pack_index, candidates, escaping, inputs, input_storages)


def never_saved(cap, call):
    """Calls SAC must recompute whenever their region is checkpointed: random ops (a saved one would shift the RNG
    of those recomputed after it), autocast's weight casts (cached once per forward, so recomputes differ in count)
    and calls whose outputs a later call mutates in place (SAC refuses a mutated cached tensor)."""
    c = cap.calls[call]
    return (c.random or c.packet == "_to_copy" or c.sac_ignored
            or any(cap.owner.get(s, call) != call for s, _ in c.makes))


# Host seconds a checkpointed region adds per op call it runs, beyond the recompute's GPU time: plain checkpointing
# (its saved-tensor hooks) and selective checkpointing (SAC's Python dispatch mode in the forward and again in the
# recompute). From the H100 run of bench/plan_step_bench.py (2026-11-28): SAC over every block made the step 38 ms
# slower than per-block checkpointing on GPT-2 (12 blocks, ~45 calls each) and 53 ms on ResNet-50 (16 blocks): about
# 80 us per call that the GPU did not hide.
SAC_HOST_S_PER_CALL = 80e-6
CHECKPOINT_HOST_S_PER_CALL = 10e-6


def kept_calls(cap, scopes, sc, recomputed):
    """The calls a checkpointed region invocation keeps (SAC's MUST_SAVE) when `recomputed` are recomputed: none when
    every candidate is (plain checkpointing), else the other candidates and the calls whose saved outputs are used
    after the region, less those SAC must recompute anyway (never_saved)."""
    if set(scopes.candidates.get(sc, {})) <= recomputed:
        return set()
    keep = (set(scopes.candidates.get(sc, {})) - recomputed) | scopes.escaping_saved.get(sc, set())
    return {i for i in keep if not never_saved(cap, i)}


def ladder(cap, scopes, speed, allow_offload, compiled=False):
    return ladder_steps(cap, scopes, speed, allow_offload, compiled)[0]


def ladder_steps(cap, scopes, speed, allow_offload, compiled=False):
    """The actions in the order plan_step takes them, and the steps it takes them in: `ends[j]` is the number of
    actions the first j+1 steps take. Independent of the budget, so a smaller budget takes a longer prefix (the
    planned peak is monotonic in the budget). A step is one region invocation's group of recomputes: first its cheap
    calls (pointwise, norms, casts, dropout: SAC saves the matmuls, convolutions and attention) where that costs less
    per byte than recomputing the whole region, then the rest (the whole region recomputed: plain checkpointing);
    steps are ordered by seconds (roofline recompute time plus the host's per-call cost of checkpointing) per byte
    given back. Then, with allow_offload, one step per offload in forward order. `compiled`: the plan is for
    torch.compile, which applies the policy when it traces: no host time per call, and no offload."""
    sac_host, checkpoint_host = (0.0, 0.0) if compiled else (SAC_HOST_S_PER_CALL, CHECKPOINT_HOST_S_PER_CALL)
    allow_offload = allow_offload and not compiled
    calls_in = Counter(scopes.call_scope)
    first = {}
    for i, sc in enumerate(scopes.call_scope):
        first.setdefault(sc, i)
    steps = []
    for sc, owners in scopes.candidates.items():
        light, heavy = [], []
        for call, storages in owners.items():
            c = cap.calls[call]
            nbytes = sum(cap.storage_bytes[s] for s in storages)
            cls = 0 if never_saved(cap, call) else (2 if c.packet in COMPUTE_INTENSIVE else 1)
            item = (cls, c.seconds / max(nbytes, 1), call, Action("recompute", sc, call, nbytes, c.seconds))
            (heavy if cls == 2 else light).append(item)
        groups = [sorted(light), sorted(heavy)]
        cost = [sum(a.seconds for *_, a in g) for g in groups]
        gain = [sum(a.nbytes for *_, a in g) for g in groups]
        selective = cost[0] + sac_host * calls_in[sc]
        whole = cost[0] + cost[1] + checkpoint_host * calls_in[sc]
        if gain[0] and gain[1] and selective / gain[0] < whole / (gain[0] + gain[1]):
            # recomputing the rest then drops SAC: the region's cost becomes `whole`
            steps.append((selective / gain[0], first[sc], 0, sc, [a for *_, a in groups[0]]))
            rest = max(max(whole - selective, 0.0) / gain[1], selective / gain[0])  # never before the first
            steps.append((rest, first[sc], 1, sc, [a for *_, a in groups[1]]))
        else:
            steps.append((whole / max(gain[0] + gain[1], 1), first[sc], 0, sc, [a for *_, a in groups[0] + groups[1]]))
    steps.sort(key=lambda t: t[:3])
    order = [acts for *_, acts in steps]
    if allow_offload:
        order += [[a] for a in _offload_actions(cap, scopes, speed, {t[3] for t in steps})]
    actions, ends = [], []
    for acts in order:
        actions += acts
        ends.append(len(actions))
    return actions, ends


def _offload_actions(cap, scopes, speed, recomputed):
    """Offload the positional inputs of checkpointed regions and the saved tensors of every other scope (the forward
    outside regions included), in forward order."""
    first_call = {}
    for c in cap.calls:
        first_call.setdefault(scopes.call_scope[c.index], c.index)
    off = []
    for sc, packs in scopes.inputs.items():
        nbytes = sum(packs.values())
        if sc in recomputed and nbytes:
            off.append((first_call[sc], Action("offload_inputs", sc, -1, nbytes,
                                               2 * nbytes / speed["host_bytes_per_s"])))
    per_scope = defaultdict(dict)
    for p, sc in zip(cap.packs, scopes.pack_scope):
        if sc not in recomputed and p.storage not in cap.fixed and p.storage in cap.owner:
            per_scope[sc][p.storage] = p.nbytes
    for sc, st in per_scope.items():
        nbytes = sum(st.values())
        if nbytes:
            off.append((first_call.get(sc, 0), Action("offload", sc, -1, nbytes,
                                                      2 * nbytes / speed["host_bytes_per_s"])))
    off.sort(key=lambda t: t[0])
    return [a for _, a in off]


def decisions(cap, scopes, regions, actions, prefetch):
    """The policy the first actions make, in the JSON form plan.save writes (docs/torch.md, "plan_step")."""
    recompute = defaultdict(set)
    offload_inputs, offload_scopes = set(), set()
    for a in actions:
        if a.kind == "recompute":
            recompute[a.scope].add(a.call)
        elif a.kind == "offload_inputs":
            offload_inputs.add(a.scope)
        else:
            offload_scopes.add(a.scope)
    func_index = {}
    counters = defaultdict(Counter)
    for c in cap.calls:
        if c.sac_ignored:
            continue
        sc = scopes.call_scope[c.index]
        func_index[c.index] = counters[sc][c.func]
        counters[sc][c.func] += 1
    packs_of = defaultdict(list)
    for p, sc in zip(cap.packs, scopes.pack_scope):
        if p.storage not in cap.fixed and p.storage in cap.owner:
            packs_of[sc].append(scopes.pack_index[p.index])
    out_regions = []
    for r in regions:
        invs = []
        for sc in sorted({sc for sc in scopes.call_scope if sc[0] == r.key}, key=lambda t: t[1]):
            inv = {"invocation": sc[1], "mode": "save", "ops": []}
            if sc in recompute:
                # every candidate recomputed: plain checkpointing (no policy, no dispatch mode); else SAC
                whole = set(scopes.candidates[sc]) <= recompute[sc]
                inv["mode"] = "checkpoint" if whole else "recompute"
                keep = kept_calls(cap, scopes, sc, recompute[sc])
                inv["must_save"] = sorted([cap.calls[i].func, func_index[i]] for i in keep)
                inv["offload_inputs"] = sorted(scopes.inputs.get(sc, {})) if sc in offload_inputs else []
                for i, stor in sorted(scopes.candidates[sc].items()):
                    inv["ops"].append({"op": cap.calls[i].func, "call": func_index.get(i, -1),
                                       "bytes": sum(cap.storage_bytes[s] for s in stor),
                                       "decision": "SAVE" if i in keep else "RECOMPUTE"})
            elif sc in offload_scopes:
                inv["mode"] = "offload"
                inv["offload_packs"] = sorted(set(packs_of[sc]))
                for i, stor in sorted(scopes.candidates[sc].items()):
                    inv["ops"].append({"op": cap.calls[i].func, "call": func_index.get(i, -1),
                                       "bytes": sum(cap.storage_bytes[s] for s in stor), "decision": "OFFLOAD"})
            invs.append(inv)
        out_regions.append({"key": r.key, "module": r.module, "segment": None if r.start is None else [r.start, r.end],
                            "invocations": invs})
    glue = sorted(set(packs_of[("", 0)])) if ("", 0) in offload_scopes else []
    return {"regions": out_regions, "outside_regions": {"offload_packs": glue}, "prefetch": prefetch}
