#!/usr/bin/env python3
"""The tensors PyTorch's autograd saves for each differentiable ATen op, read from PyTorch's own sources: the
derivatives.yaml and native_functions.yaml that the torch wheel ships in torchgen/packaged, parsed by torchgen's own
loader (load_derivatives: the saved inputs and outputs gen_autograd generates the backward nodes from). Only
tensor-valued saved variables are kept (sizes, scalars and options are not memory). Writes the table as JSON:

    {"torch": "2.11.0", "ops": {"gelu": {"inputs": ["self"], "outputs": []}, "native_layer_norm": {...}, ...}}

keyed by the op name and overload ("mul.Tensor"; no overload: the bare name). tests/python/test_torch_saved_table.py
holds memplan's backward rules to this table and, where the installed torch is the pinned version, regenerates it.

    python3 scripts/gen_pytorch_saved.py > samples/pytorch/saved_tensors.json
"""
import json
import os
import sys


def saved_table():
    import torch
    import torchgen
    from torchgen.model import BaseTy, BaseType, ListType, OptionalType
    from torchgen.packaged.autograd.load_derivatives import load_derivatives

    base = os.path.join(os.path.dirname(torchgen.__file__), "packaged")
    infos, _ = load_derivatives(os.path.join(base, "autograd", "derivatives.yaml"),
                                os.path.join(base, "ATen", "native", "native_functions.yaml"),
                                os.path.join(base, "ATen", "native", "tags.yaml"))

    def is_tensor(t):
        while isinstance(t, (OptionalType, ListType)):
            t = t.elem
        return isinstance(t, BaseType) and t.name == BaseTy.Tensor

    ops = {}
    for schema, by_key in infos.items():
        info = by_key.get("Default") or next(iter(by_key.values()))
        args = {a.name: a for a in schema.arguments.flat_all}
        name = str(schema.name)
        inputs = sorted({s.nctype.name for s in info.all_saved_inputs
                         if s.nctype.name in args and is_tensor(args[s.nctype.name].type)})
        outputs = sorted({s.nctype.name for s in info.all_saved_outputs
                          if s.nctype.name == "result" or s.nctype.name.startswith("result")
                          and s.nctype.name[6:].isdigit()})
        ops[name] = {"inputs": inputs, "outputs": outputs}
    return {"torch": torch.__version__.split("+")[0], "source": "torchgen/packaged/autograd/derivatives.yaml",
            "ops": dict(sorted(ops.items()))}


def main():
    json.dump(saved_table(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
