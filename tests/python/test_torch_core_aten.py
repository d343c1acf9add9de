#!/usr/bin/env python3
"""Every op of PyTorch's core ATen opset (the overloads PyTorch tags torch.Tag.core) is either mapped by
memplan_torch (aten_ops.OPS) or refused with a documented reason (aten_ops.REFUSED, listed in docs/torch.md).
The list comes from PyTorch itself, so a new core op fails here until it is mapped or refused. Exit 77 without
torch."""
import os
import sys

from torch_testlib import REPO, Results, args, need_torch

A = args()
need_torch()

import torch  # noqa: E402

from memplan_torch import export  # noqa: E402,F401  (registers every op table)
from memplan_torch.aten_ops import OPS, REFUSED  # noqa: E402


def core_packets():
    """Names of the aten overload packets with at least one overload tagged core."""
    out = set()
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for ov in packet.overloads():
            if torch.Tag.core in getattr(packet, ov).tags:
                out.add(packet.__name__)
                break
    return out


def check_core_covered():
    core = core_packets()
    assert len(core) > 100, f"only {len(core)} core ATen ops found: PyTorch's tags changed?"
    missing = sorted(op for op in core if op not in OPS and op not in REFUSED)
    assert not missing, f"{len(missing)} core ATen op(s) neither mapped nor refused: {', '.join(missing)}"


def check_refusals_documented():
    doc = open(os.path.join(REPO, "docs", "torch.md")).read()
    for op, reason in REFUSED.items():
        assert reason.strip(), f"{op}: empty refusal reason"
        assert f"`{op}`" in doc, f"refused op {op} is not listed in docs/torch.md"


def check_no_op_both():
    both = sorted(set(OPS) & set(REFUSED))
    assert not both, f"mapped and refused at once: {both}"


def main():
    r = Results()
    r.run("every core ATen op is mapped or refused with a reason", check_core_covered)
    r.run("every refused op is listed in docs/torch.md", check_refusals_documented)
    r.run("no op is both mapped and refused", check_no_op_both)
    return r.finish()


if __name__ == "__main__":
    sys.exit(main())
