"""The estimated step as memplan's allocation trace (docs/torch-allocator.md, "Trace files"), unplanned: the
last step's allocations and frees in order, which `memplan viz --trace FILE` plans, verifies and draws."""
import json
import os
import tempfile

from .caching_allocator import round_size


def step_trace(rec, report, steps):
    """The trace object of the recorder's last step (every block on stream 0)."""
    last = steps - 1
    blocks, events, index = [], [], {}
    # blocks of the step before, live at its end, by bytes in allocation order: the rank a free names
    prev_live = _live_at_end(rec, last - 1)
    rank_of = {}
    counts = {}
    for bid in prev_live:
        nb = round_size(rec.blocks[bid]["bytes"])
        rank_of[bid] = counts.get(nb, 0)
        counts[nb] = rank_of[bid] + 1
    started = False
    for kind, bid in rec.events:
        if kind == "op":
            continue
        b = rec.blocks[bid]
        if not started:
            if kind == "alloc" and b["step"] == last:
                started = True
            else:
                continue
        nbytes = round_size(b["bytes"])
        if kind == "alloc":
            index[bid] = len(blocks)
            blocks.append({"size": b["bytes"], "bytes": nbytes, "stream": 0, "alloc_event": len(events),
                           "free_event": None})
            events.append({"kind": "alloc", "block": index[bid], "bytes": nbytes})
        elif bid in index:
            blocks[index[bid]]["free_event"] = len(events)
            events.append({"kind": "free", "block": index[bid], "bytes": nbytes})
        else:
            ev = {"kind": "free", "block": -1, "bytes": nbytes}
            if bid in rank_of:
                ev["earlier_rank"] = rank_of[bid]
            events.append(ev)
    return {"format": "memplan-allocation-trace", "version": 1, "device": 0, "alignment": 512,
            "primary_stream": 0, "planned": False,
            "caching_allocator_reserved_bytes": report["peak_reserved_bytes"],
            "caching_allocator_max_allocated_bytes": report["peak_allocated_bytes"],
            "events": events, "blocks": blocks}


def _live_at_end(rec, step):
    """Block ids allocated in `step` and still live when the next step allocates its first block."""
    live = []
    alive = set()
    for kind, bid in rec.events:
        if kind == "op":
            continue
        b = rec.blocks[bid]
        if kind == "alloc" and b["step"] > step:
            break
        if kind == "alloc" and b["step"] == step:
            alive.add(bid)
            live.append(bid)
        elif kind == "free":
            alive.discard(bid)
    return [bid for bid in live if bid in alive]


def write_trace(path, rec, report, steps):
    """Writes the trace all or nothing (a temporary file renamed into place)."""
    doc = step_trace(rec, report, steps)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".trace-", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
