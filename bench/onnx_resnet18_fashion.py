#!/usr/bin/python3
"""Writes torchvision's ResNet-18 (bench/torch_models.py: 10 classes, CIFAR-sized
3 x 32 x 32 input) as an ONNX file for Fashion-MNIST, the model that
experiments/onnx-resnet18.json trains under the regimes. The graph takes the workload's
grey 1 x 28 x 28 images and brings them to the network's input itself: a Pad of 2 zeros
on each side (32 x 32), then a Concat of the grey channel three times (3 channels). The
export keeps BatchNorm as nodes and the batch dim symbolic (docs/onnx.md).

    /usr/bin/python3 bench/onnx_resnet18_fashion.py             writes models/resnet18-fashion.onnx
    /usr/bin/python3 bench/onnx_resnet18_fashion.py --out m.onnx --seed 2

Run it with Debian's /usr/bin/python3 (python3-torch, python3-onnx) or a newer torch.
"""

import argparse
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import ResNet18  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ZeroPad2(torch.autograd.Function):
    """Two zeros on each side of H and W. PyTorch's own F.pad exports its pads as a chain
    of shape ops unless constant folding is on (and folding would fuse BatchNorm into the
    convolutions), so this writes the Pad node with constant pads itself."""

    @staticmethod
    def forward(ctx, x):
        return nn.functional.pad(x, (2, 2, 2, 2))

    @staticmethod
    def backward(ctx, grad):
        return grad[:, :, 2:-2, 2:-2]

    @staticmethod
    def symbolic(g, x):
        pads = g.op("Constant", value_t=torch.tensor([0, 0, 2, 2, 0, 0, 2, 2], dtype=torch.int64))
        return g.op("Pad", x, pads, mode_s="constant")


class FashionResNet18(ResNet18):
    """ResNet-18 behind the grey-to-CIFAR step: (N, 1, 28, 28) -> (N, 3, 32, 32) -> 10
    logits. Its parameters keep torchvision's names."""

    def forward(self, x):
        x = ZeroPad2.apply(x)
        return super().forward(torch.cat([x, x, x], 1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(ROOT, "models", "resnet18-fashion.onnx"),
                   help="where to write the file (default: models/resnet18-fashion.onnx in the checkout)")
    p.add_argument("--seed", type=int, default=1, help="PyTorch's seed for the initial weights")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    model = FashionResNet18(10).eval()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    torch.onnx.export(model, torch.rand(1, 1, 28, 28), args.out, input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}}, opset_version=13,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    params = sum(t.numel() for t in model.parameters())
    print(f"wrote {args.out}: ResNet-18, {params} parameters, input 1 x 28 x 28 (padded and repeated to "
          f"3 x 32 x 32 in the graph), 10 classes, torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
