"""A planned step's peak computed from the unplanned step's record instead of running the step again: each storage a
prefix of the ladder gives back leaves the device after its last use in the forward and comes back where the
backward first needs it (recompute: when its region's first saved tensor is unpacked, as checkpoint recomputes the
region; offload: when it is unpacked), and dies where it died unplanned; a recomputed region's forward runs again
there with its temporaries, and the outputs of the calls SAC keeps stay until then. The births and deaths so moved
are replayed through the caching allocator model. plan_step guesses on these peaks and confirms with estimates
(autograd's and checkpoint's own bookkeeping is not in the record)."""
from collections import defaultdict

from .caching_allocator import CachingAllocator
from .plan_policy import kept_calls


class TraceSimulator:
    """peak(k): the simulated peak of the ladder's first k actions over one capture (plan_capture.StepCapture)."""

    def __init__(self, cap, scopes, actions):
        rec = cap.recorder
        self.cap, self.scopes, self.actions = cap, scopes, actions
        self.blocks = rec.blocks
        self.events = [e for e in rec.events if e[0] != "op"]
        self.shift, kept = [], 0  # positions in rec.events -> positions in self.events
        for e in rec.events:
            self.shift.append(kept)
            kept += e[0] != "op"
        self.shift.append(kept)
        self.last = max((b["step"] for b in self.blocks), default=0)
        self.free_at = {bid: i for i, (kind, bid) in enumerate(self.events) if kind == "free"}
        self.born_at = {bid: i for i, (kind, bid) in enumerate(self.events) if kind == "alloc"}
        self.last_read = {}          # storage -> the last forward call that reads (or makes) it
        self.region_calls = defaultdict(list)  # scope -> its calls in order
        self.last_reader = {}        # (scope, storage) -> the last call of the scope that reads it
        for c in cap.calls:
            sc = scopes.call_scope[c.index]
            for s in c.reads:
                self.last_read[s] = c.index
                if sc[0]:
                    self.last_reader[(sc, s)] = c.index
            for s, _ in c.makes:
                self.last_read.setdefault(s, c.index)
            if sc[0]:
                self.region_calls[sc].append(c.index)
        self.makes = {c.index: [(s, n) for s, n in c.makes if s not in cap.fixed] for c in cap.calls}
        self._unpack_positions()
        self.never_saved = {}
        self.call_moves = {}  # (scope, candidate call) -> the moves of its saved storages when recomputed
        for sc, owners in scopes.candidates.items():
            for call, storages in owners.items():
                ms = [self._move(s, self.region_trigger.get(sc)) for s in storages]
                self.call_moves[(sc, call)] = [m + (s,) for m, s in zip(ms, storages) if m is not None]
        self.moves = [self._offload_moves(a) for a in actions]  # per action (offload): its moves
        self.cache = {}

    def _unpack_positions(self):
        """Where the backward first unpacks each saved storage, and each scope's first unpack (its recompute)."""
        self.unpack_of_storage, self.region_trigger = {}, {}
        self.saved_scopes = defaultdict(set)  # storage -> the scopes whose saved tensors hold it
        for p in self.cap.packs:
            self.saved_scopes[p.storage].add(self.scopes.pack_scope[p.index])
        for p in self.cap.packs:
            at = self.cap.event_at_unpack.get(p.index)
            if at is None:
                continue
            at = self.shift[at]
            sc = self.scopes.pack_scope[p.index]
            self.region_trigger[sc] = min(self.region_trigger.get(sc, at), at)
            self.unpack_of_storage[p.storage] = min(self.unpack_of_storage.get(p.storage, at), at)

    def _move(self, s, back_at):
        """(block, leaves at, back at, died at) for storage s, or None where the record cannot say."""
        bid = self.cap.block_of.get(s)
        if bid is None or s not in self.last_read or back_at is None or bid not in self.free_at:
            return None
        leave = self.shift[self.cap.event_after_call[self.last_read[s]]]
        if not self.born_at[bid] < leave <= back_at <= self.free_at[bid]:
            return None
        return (bid, leave, back_at, self.free_at[bid])

    def _offload_moves(self, a):
        """An offloaded storage that another scope's saved tensors also hold stays on the device: its copy back is
        then one more block (leaves at None)."""
        cap, scopes = self.cap, self.scopes
        found = []
        if a.kind == "offload_inputs":
            own = (scopes.input_storages or {}).get(a.scope, {})
            for j in scopes.inputs.get(a.scope, {}):
                s = own.get(j)
                if s is not None and s in cap.owner and s not in cap.fixed:
                    found.append((s, self._move(s, self.region_trigger.get(a.scope))))
        elif a.kind == "offload":
            for p in cap.packs:
                if scopes.pack_scope[p.index] == a.scope and p.storage not in cap.fixed and p.storage in cap.owner:
                    found.append((p.storage, self._move(p.storage, self.unpack_of_storage.get(p.storage))))
        ms = []
        for s, m in found:
            if m is not None:
                held = any(sc != a.scope for sc in self.saved_scopes.get(s, ()))
                ms.append((m[0], None, m[2], m[3]) if held else m)
        return ms

    def peak(self, k):
        """The step's peak allocated bytes with the first k actions taken, as the record replayed says."""
        if k in self.cache:
            return self.cache[k]
        inserts = defaultdict(list)
        renamed = {}
        moved = set()
        extra = len(self.blocks)
        extra_bytes = {}
        recomputed = defaultdict(set)   # scope -> calls recomputed
        back_of = {}                    # recomputed storage -> its block's new id
        for a in self.actions[:k]:
            if a.kind == "recompute":
                recomputed[a.scope].add(a.call)
        for sc, calls in recomputed.items():
            # once a region is checkpointed, SAC recomputes every call it must (plan_policy.never_saved) too
            calls |= {c for c in self.scopes.candidates.get(sc, {}) if self._never_saved(c)}
        moves = [(True, m) for sc, calls in sorted(recomputed.items()) for c in sorted(calls)
                 for m in self.call_moves.get((sc, c), ())]
        moves += [(False, m) for a, ms in zip(self.actions[:k], self.moves[:k]) if a.kind != "recompute"
                  for m in ms]
        for recompute, m in moves:
            bid, leave, back, died = m[:4]
            if bid in moved:
                continue
            moved.add(bid)
            if leave is None:  # a copy beside a storage that stays
                extra_bytes[extra] = self.blocks[bid]["bytes"]
                inserts[back].append(("alloc", extra))
                inserts[died].append(("free", extra))
                extra += 1
                continue
            inserts[leave].append(("free", bid))
            if recompute:
                back_of[m[4]] = extra
            else:
                inserts[back].append(("alloc", extra))
            extra_bytes[extra] = self.blocks[bid]["bytes"]
            renamed[bid] = extra
            extra += 1
        for sc, calls in recomputed.items():
            extra = self._recompute_burst(sc, calls, inserts, back_of, extra_bytes, extra, renamed, moved)
        self.cache[k] = self._replay(inserts, renamed, extra_bytes)
        return self.cache[k]

    def _replay(self, inserts, renamed, extra_bytes):
        """The last step's peak allocated bytes of the record with `inserts` (position -> events before it), the
        frees of `renamed` blocks redirected, and the `extra_bytes` blocks added."""
        alloc = CachingAllocator()
        live = {}
        in_last = False
        blocks = self.blocks
        last = self.last

        def apply(kind, bid):
            nonlocal in_last
            if kind == "alloc":
                nbytes = extra_bytes.get(bid)
                if nbytes is None:
                    b = blocks[bid]
                    nbytes = b["bytes"]
                    if not in_last and b["step"] == last:
                        in_last = True
                        alloc.reset_peak()
                live[bid] = alloc.alloc(nbytes)
            else:
                blk = live.pop(bid, None)
                if blk is not None:
                    alloc.free(blk)

        for i, (kind, bid) in enumerate(self.events):
            for e in inserts.get(i, ()):
                apply(*e)
            if kind == "free" and bid in renamed:
                bid = renamed[bid]
            apply(kind, bid)
        return alloc.peak_allocated

    def _recompute_burst(self, sc, calls, inserts, back_of, extra_bytes, extra, renamed, moved):
        """The region's forward run again where its first saved tensor is unpacked, up to the last call it must
        recompute (checkpoint's early stop): a recomputed saved storage stays until it died unplanned, every other
        output dies after its last reader in the region. The calls SAC keeps are not run: their outputs, all of them
        (SAC caches an op's outputs, not only those autograd saves), live from the forward until the recompute takes
        them from the cache."""
        at = self.region_trigger.get(sc)
        if at is None:
            return extra
        keep = kept_calls(self.cap, self.scopes, sc, calls)
        stop = max(calls)
        seq = inserts[at]
        dying = defaultdict(list)  # call -> blocks freed after it
        held = []  # kept outputs that died in the forward unplanned: given back at the recompute
        for c in self.region_calls[sc]:
            if c in keep:
                for s, _ in self.makes[c]:
                    bid = self.cap.block_of.get(s)
                    if bid is not None and bid not in moved and self.free_at.get(bid, at) < at:
                        moved.add(bid)
                        renamed[bid] = -1  # the forward's free no longer happens there
                        if c > stop:
                            held.append(bid)
                        else:
                            dying[max(c, min(stop, self.last_reader.get((sc, s), c)))].append(bid)
        for c in self.region_calls[sc]:
            if c > stop:
                break
            if c not in keep:
                for s, nbytes in self.makes[c]:
                    if s in back_of:
                        seq.append(("alloc", back_of[s]))
                        continue
                    extra_bytes[extra] = nbytes
                    seq.append(("alloc", extra))
                    dying[max(c, min(stop, self.last_reader.get((sc, s), c)))].append(extra)
                    extra += 1
            for b in dying.pop(c, ()):
                seq.append(("free", b))
        for b in held:
            seq.append(("free", b))
        return extra

    def _never_saved(self, call):
        v = self.never_saved.get(call)
        if v is None:
            from .plan_policy import never_saved

            v = self.never_saved[call] = never_saved(self.cap, call)
        return v
