#!/usr/bin/env python3
"""Writes the ONNX test models of tests/workloads/onnx/ from PyTorch, with what PyTorch
computes on them: a small residual CNN (tiny_cnn) and a tiny Vision Transformer
(tiny_vit: patch 7, width 16, depth 2, 2 heads; bench/torch_vit.py) for
Fashion-MNIST-sized input (1x28x28, 10 classes), exported with PyTorch's TorchScript
exporter, and beside each a SequenceProto of named tensors: a batch, its labels, the
eval-mode logits, and every parameter after one SGD step (lr 0.1, cross-entropy, train
mode) from the exported weights. And unsupported_op.onnx: the same input through an op
the importer refuses (Cos).

Run with a Python that has torch and onnx (Debian: python3-torch, python3-onnx):
    python3 tests/data/onnx/make_fixtures.py
"""
import os
import sys

import onnx
import torch
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "bench"))
from torch_vit import ViT, export  # noqa: E402


class TinyCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(4)
        self.pool = torch.nn.MaxPool2d(2)
        self.conv2 = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.conv3 = torch.nn.Conv2d(4, 8, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = x + torch.relu(self.conv2(x))  # a skip: no cut inside it
        x = torch.relu(self.conv3(x))
        x = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


def named(t, name):
    p = numpy_helper.from_array(t.detach().numpy(), name)
    return p


def main():
    torch.manual_seed(0)
    model = TinyCnn()
    with torch.no_grad():  # running statistics away from their initial 0 and 1
        model.bn1.running_mean.uniform_(-0.2, 0.2)
        model.bn1.running_var.uniform_(0.5, 1.5)
    model.eval()
    x = torch.rand(4, 1, 28, 28)
    path = os.path.join(HERE, "tiny_cnn.onnx")
    torch.onnx.export(model, x, path, input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}}, opset_version=13,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    expect(model, x, path, "tiny_cnn_expected.pb")


def tiny_vit():
    torch.manual_seed(0)
    model = ViT(image=28, patch=7, channels=1, classes=10, dim=16, depth=2, heads=2)
    x = torch.rand(4, 1, 28, 28)
    path = os.path.join(HERE, "tiny_vit.onnx")
    export(model, x[:1], path)  # a batch of 1 at export: the graph must not fix N
    expect(model, x, path, "tiny_vit_expected.pb")


def expect(model, x, path, out_name):
    """PyTorch's logits on x and one SGD step's weights, beside the model at path."""
    onnx.checker.check_model(onnx.load(path))
    labels = torch.tensor([3, 1, 4, 1])
    seq = onnx.SequenceProto()
    seq.name = "expected"
    seq.elem_type = onnx.SequenceProto.TENSOR
    with torch.no_grad():
        logits = model(x)
    tensors = [named(x, "input"), named(labels.float(), "labels"), named(logits, "logits")]
    model.train()
    loss = torch.nn.functional.cross_entropy(model(x), labels)
    loss.backward()
    with torch.no_grad():
        for name, p in model.named_parameters():
            tensors.append(named(p - 0.1 * p.grad, "step." + name))
    seq.tensor_values.extend(tensors)
    with open(os.path.join(HERE, out_name), "wb") as f:
        f.write(seq.SerializeToString())


def unsupported():
    from onnx import TensorProto, helper
    image = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 28, 28])
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])
    w = numpy_helper.from_array(torch.zeros(10, 784).numpy(), "fc.weight")
    nodes = [helper.make_node("Cos", ["image"], ["e"], name="the_cos"),
             helper.make_node("Flatten", ["e"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc.weight"], ["logits"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, "unsupported", [image], [logits], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(HERE, "unsupported_op.onnx"))


if __name__ == "__main__":
    unsupported()
    main()
    tiny_vit()
