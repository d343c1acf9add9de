#!/usr/bin/env python3
"""The eager model's cuDNN convolution rule (planner/pytorch/cudnn_conv.cpp, through the hidden `memplan
pytorch-rule conv`) gives the same allocations as memplan_torch's (device_rules.conv_memory_format, conv_backend,
conv_workspace_bytes; estimate._conv_sequence) on a grid of convolutions: 1-d, 2-d and 3-d, strides, dilations,
groups and depthwise, transposed, fp32 / bf16 / fp16, contiguous and channels-last input, weight and output
gradient, each pass of convolution_backward alone and together. The Python rule is the source of truth. Exit 77
without torch."""
import itertools
import json
import subprocess
import sys

from torch_testlib import Results, args, need_torch

A = args()
need_torch()

import torch  # noqa: E402

from memplan_torch.device_rules import conv_backend, conv_memory_format, conv_workspace_bytes  # noqa: E402
from memplan_torch.estimate import _conv_sequence  # noqa: E402

# (rank, batch, in channels, out channels, spatial size, kernel, stride, dilation, groups, transposed): the families
# of device_rules.py and their edges (the FFT forward's 76-160 input channels and 8x8 outputs, the FFT input
# gradient's 40-80 pixel maps, the fp32 weight gradient's 32 channels a group and 56x56 maps), 1x1 GEMMs, depthwise
# with and without a channel multiplier, one channel, 1x1 maps.
SPECS = [
    (2, 8, 3, 64, 224, 7, 2, 1, 1, False), (2, 8, 64, 64, 56, 3, 1, 1, 1, False), (2, 8, 64, 64, 56, 1, 1, 1, 1, False),
    (2, 8, 64, 128, 56, 3, 2, 1, 1, False), (2, 8, 64, 256, 56, 1, 1, 1, 1, False), (2, 8, 64, 128, 56, 1, 2, 1, 1, False),
    (2, 8, 96, 128, 8, 3, 1, 1, 1, False), (2, 8, 160, 160, 7, 3, 1, 1, 1, False), (2, 8, 76, 76, 8, 3, 1, 1, 1, False),
    (2, 8, 75, 80, 8, 3, 1, 1, 1, False), (2, 8, 161, 80, 8, 3, 1, 1, 1, False), (2, 8, 96, 75, 8, 3, 1, 1, 1, False),
    (2, 8, 96, 96, 9, 3, 1, 1, 1, False), (2, 8, 64, 64, 40, 3, 1, 1, 1, False), (2, 8, 64, 64, 80, 3, 1, 1, 1, False),
    (2, 8, 64, 64, 81, 3, 1, 1, 1, False), (2, 8, 63, 64, 56, 3, 1, 1, 1, False), (2, 8, 64, 63, 56, 3, 1, 1, 1, False),
    (2, 8, 32, 32, 112, 3, 1, 1, 1, False), (2, 8, 32, 32, 56, 3, 1, 1, 1, False), (2, 8, 64, 64, 112, 3, 1, 1, 1, False),
    (2, 8, 31, 64, 28, 3, 1, 1, 1, False), (2, 8, 64, 64, 56, 3, 1, 1, 2, False), (2, 8, 128, 128, 28, 3, 1, 1, 4, False),
    (2, 8, 128, 128, 28, 3, 1, 1, 8, False), (2, 8, 64, 64, 56, 3, 1, 1, 64, False), (2, 8, 64, 128, 28, 3, 1, 1, 64, False),
    (2, 8, 96, 96, 14, 7, 1, 1, 96, False), (2, 8, 64, 64, 28, 3, 1, 2, 1, False), (2, 8, 96, 192, 56, 2, 2, 1, 1, False),
    (2, 8, 256, 512, 1, 1, 1, 1, 1, False), (2, 8, 256, 256, 1, 3, 1, 1, 1, False), (2, 8, 1, 32, 28, 3, 1, 1, 1, False),
    (2, 8, 64, 32, 28, 4, 2, 1, 1, True), (2, 8, 64, 64, 14, 3, 1, 1, 64, True),
    (1, 8, 64, 64, 256, 3, 1, 1, 1, False), (1, 8, 64, 64, 256, 1, 1, 1, 1, False), (1, 8, 64, 64, 256, 4, 1, 1, 64, False),
    (1, 8, 80, 80, 512, 3, 2, 1, 1, False), (1, 4, 32, 16, 128, 4, 2, 1, 1, True),
    (3, 2, 32, 64, 16, 3, 1, 1, 1, False), (3, 2, 64, 64, 8, 1, 1, 1, 1, False), (3, 2, 16, 16, 16, 3, 1, 1, 16, False),
    (3, 2, 32, 32, 8, 3, 2, 1, 1, False),
]
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
CL = {4: torch.channels_last, 5: torch.channels_last_3d}


def meta(shape, dtype, channels_last):
    fmt = CL[len(shape)] if channels_last else torch.contiguous_format
    return torch.empty(shape, dtype=dtype, device="meta", memory_format=fmt)


def layout(t):
    cl = CL.get(t.dim())
    return "channels_last" if cl is not None and t.is_contiguous(memory_format=cl) and not t.is_contiguous() else "contiguous"


def cases():
    """(name, aten args, its outputs, the C++ rule's JSON input) for every forward and backward of the grid."""
    for (rank, n, c, k, size, kern, stride, dil, groups, transposed), dtype in itertools.product(SPECS, DTYPES):
        layouts = [(False, False, False)] if rank == 1 else list(itertools.product((False, True), repeat=3))
        for x_cl, w_cl, go_cl in layouts:
            x = meta([n, c] + [size] * rank, dtype, x_cl)
            wshape = [c, k // groups] if transposed else [k, c // groups]
            w = meta(wshape + [kern] * rank, dtype, w_cl)
            pad = [dil * (kern - 1) // 2] * rank
            st, dl = [stride] * rank, [dil] * rank
            y = torch.ops.aten.convolution(x, w, None, st, pad, dl, transposed, [0] * rank, groups)
            go = meta(list(y.shape), dtype, go_cl)
            rule = {"x": {"shape": list(x.shape), "layout": layout(x)}, "w": {"shape": list(w.shape), "layout": layout(w)},
                    "y": {"shape": list(go.shape), "layout": layout(go)}, "dtype": str(dtype).replace("torch.", ""),
                    "stride": st, "dilation": dl, "groups": groups, "transposed": transposed}
            yield ("convolution", (x, w, None, st, pad, dl, transposed, [0] * rank, groups), y, rule)
            for mask in ((True, True, False), (False, True, False), (True, False, False)):
                gi = torch.empty_like(x) if mask[0] else None
                gw = torch.empty_like(w) if mask[1] else None
                yield ("convolution_backward", (go, x, w, None, st, pad, dl, transposed, [0] * rank, groups, list(mask)),
                       (gi, gw, None), rule)


def cpp_rule(rules):
    p = subprocess.run([A.memplan, "pytorch-rule", "conv"], input="".join(json.dumps(r) + "\n" for r in rules),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(out) == len(rules), (len(out), len(rules))
    return out


def cpp_sequence(name, aten_args, facts):
    """The allocations the C++ facts make, in estimate._conv_sequence's order and form (outputs by shape)."""
    transposed = aten_args[6] if name == "convolution" else aten_args[7]
    cudnn = facts["cudnn"] and not transposed
    ws, cp = facts["workspace"], facts["copies"]
    if name == "convolution":
        return [("hold", cp["x"]), ("hold", cp["w"]), ("out", "y")] + ([("workspace", ws["forward"])] if cudnn else [])
    mask = aten_args[10]
    seq = [("hold", cp["y"]), ("hold", cp["x"] if mask[1] else 0), ("hold", cp["w"] if mask[0] else 0), ("out", "gi")]
    if cudnn and mask[0]:
        seq.append(("workspace", ws["backward_data"]))
    seq.append(("out", "gw"))
    if cudnn and mask[1]:
        seq.append(("workspace", ws["backward_filter"]))
    return seq


def python_sequence(name, aten_args, out):
    names = iter(["y"] if name == "convolution" else ["gi", "gw"])
    return [(kind, next(names)) if kind == "out" else (kind, v) for kind, v in _conv_sequence(name, aten_args, out)]


GRID = list(cases())
FACTS = cpp_rule([rule for _, _, _, rule in GRID])


def sequences_match():
    bad = []
    for (name, aten_args, out, rule), facts in zip(GRID, FACTS):
        want, got = python_sequence(name, aten_args, out), cpp_sequence(name, aten_args, facts)
        if want != got:
            bad.append(f"{name} {json.dumps(rule)}: python {want}, memplan {got}")
    assert not bad, f"{len(bad)} of {len(GRID)} differ; first: " + "; ".join(bad[:3])


def rule_parts_match():
    """The memory format, the backend and the three passes' workspaces, also where the sequence does not use them."""
    bad = []
    for (name, aten_args, _, rule), facts in zip(GRID, FACTS):
        if name != "convolution":
            continue
        x, w, y = aten_args[0], aten_args[1], torch.empty(rule["y"]["shape"], dtype=aten_args[0].dtype, device="meta")
        fmt = "channels_last" if conv_memory_format(x, w) != torch.contiguous_format else "contiguous"
        want = {"memory_format": fmt, "cudnn": conv_backend(x, w, rule["transposed"], rule["groups"]) == "cudnn",
                "workspace": {p: conv_workspace_bytes(x, w, y, rule["stride"], rule["dilation"], rule["groups"], p)
                              for p in ("forward", "backward_data", "backward_filter")}}
        got = {k: facts[k] for k in want}
        if want != got:
            bad.append(f"{json.dumps(rule)}: python {want}, memplan {got}")
    assert not bad, f"{len(bad)} differ; first: " + "; ".join(bad[:3])


def grid_reaches_every_family():
    """Each workspace family and copy of the rule is non-zero somewhere in the grid (else the grid proves nothing)."""
    seen = set()
    for (name, aten_args, _, rule), facts in zip(GRID, FACTS):
        if name != "convolution":
            continue
        for p, v in facts["workspace"].items():
            if v:
                seen.add((rule["dtype"], facts["memory_format"], p))
        for k, v in facts["copies"].items():
            if v:
                seen.add(("copy", k))
        if not facts["cudnn"]:
            seen.add("depthwise")
    want = {("float32", "contiguous", p) for p in ("forward", "backward_data", "backward_filter")}
    want |= {("float32", "channels_last", p) for p in ("forward", "backward_data")}
    want |= {(d, "contiguous", p) for d in ("bfloat16", "float16") for p in ("forward", "backward_data", "backward_filter")}
    want |= {("copy", k) for k in "xwy"} | {"depthwise"}
    assert want <= seen, f"never reached: {sorted(map(str, want - seen))}"


R = Results()
R.run(f"memplan's convolution allocations equal estimate_step's on {len(GRID)} grid cases", sequences_match)
R.run("memory format, backend and per-pass workspaces equal device_rules'", rule_parts_match)
R.run("the grid reaches every workspace family and operand copy", grid_reaches_every_family)
sys.exit(R.finish())
