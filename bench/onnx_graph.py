"""A small ONNX graph builder shared by the bench scripts that write synthetic models (make_gpt.py,
multi_gpu_plans.py): weights as external data that is never written (only their dims matter to memplan),
constants inline, nodes named by op and index."""
from onnx import TensorProto, helper


class OnnxGraph:
    def __init__(self, weights_file):
        self.nodes, self.inits, self.offset, self.weights_file = [], [], 0, weights_file

    def weight(self, name, dims):
        t = TensorProto()
        t.name, t.data_type = name, TensorProto.FLOAT
        t.dims.extend(dims)
        t.data_location = TensorProto.EXTERNAL
        n = 4
        for x in dims:
            n *= x
        for k, v in (("location", self.weights_file), ("offset", str(self.offset)), ("length", str(n))):
            e = t.external_data.add()
            e.key, e.value = k, v
        self.offset += n
        self.inits.append(t)
        return name

    def const(self, name, dtype, dims, vals):
        self.inits.append(helper.make_tensor(name, dtype, dims, vals))
        return name

    def node(self, op, ins, outs=None, name=None, **attrs):
        outs = outs or [f"{op.lower()}_{len(self.nodes)}"]
        self.nodes.append(helper.make_node(op, ins, outs, name=name or f"{op}_{len(self.nodes)}", **attrs))
        return outs[0] if len(outs) == 1 else outs
