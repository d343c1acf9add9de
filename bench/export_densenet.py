#!/usr/bin/env python3
"""Exports the DenseNet samples (issue 18, concat in place) into samples/models:

- densenet121.dyn.onnx: torchvision DenseNet-121, eval mode, TorchScript exporter (opset 17), symbolic `batch`,
  weights >= 1 KiB as external data whose file is deleted (as the other corpus models: only dims are kept).
- densenet121.train.onnx: the same in training mode (BatchNormalization with running statistics), symbolic `batch`.
- tiny_densenet.onnx (+ .input.npy, .output.npy): a small DenseNet (growth 8, blocks (2, 2), 16 initial features,
  1x3x32x32) with its weights inline, for bit-equality runs on the CPU.

Usage: python3 bench/export_densenet.py [out_dir]   (default samples/models)
"""
import io
import os
import sys
import warnings

import numpy as np
import onnx
import torch
import torchvision

sys.path.insert(0, os.path.dirname(__file__))
from export_transformers import strip_and_save  # noqa: E402


def export(model, x, train, dynamic):
    buf = io.BytesIO()
    mode = torch.onnx.TrainingMode.TRAINING if train else torch.onnx.TrainingMode.EVAL
    axes = {"input": {0: "batch"}, "logits": {0: "batch"}} if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), buf, input_names=["input"], output_names=["logits"], dynamic_axes=axes,
                          opset_version=17, training=mode, do_constant_folding=not train, dynamo=False)
    proto = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(proto)
    return proto


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "samples/models"
    torch.manual_seed(0)
    big = torchvision.models.densenet121(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    strip_and_save(export(big, x, False, True), os.path.join(out, "densenet121.dyn.onnx"))
    strip_and_save(export(big.train(), x.repeat(2, 1, 1, 1), True, True), os.path.join(out, "densenet121.train.onnx"))

    tiny = torchvision.models.DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16, bn_size=2,
                                       num_classes=10).eval()
    with torch.no_grad():  # non-trivial BatchNorm statistics, so the folded graph is not an identity
        for m in tiny.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    xt = torch.randn(1, 3, 32, 32)
    proto = export(tiny, xt, False, False)
    onnx.save_model(proto, os.path.join(out, "tiny_densenet.onnx"))
    with torch.no_grad():
        y = tiny(xt)
    np.save(os.path.join(out, "tiny_densenet.input.npy"), xt.numpy())
    np.save(os.path.join(out, "tiny_densenet.output.npy"), y.numpy())


if __name__ == "__main__":
    main()
