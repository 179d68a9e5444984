#!/usr/bin/python3
"""ResNet-18 exported from PyTorch to ONNX and imported by Quartet: the forward and one
SGD step against PyTorch from the same weights. torchvision's ResNet-18 (written out
here, so torchvision is not needed: BasicBlock, [2, 2, 2, 2], its initialisation) with
10 classes on CIFAR-sized input (3 x 32 x 32), exported with BatchNorm kept as nodes;
quartet-bench-step takes one SGD step (train mode: batch statistics) in float32 from a
safetensors file of PyTorch's weights and a batch, and PyTorch takes the same step in
float32 and in float64. Prints each parameter's relative error after the step,
||quartet - reference|| / ||reference||, against both; exits 1 when one passes
--tolerance.

    /usr/bin/python3 bench/onnx_resnet18_parity.py --step build/bench/quartet-bench-step

Run it with Debian's /usr/bin/python3 (python3-torch; the export uses its TorchScript
exporter) or a newer torch.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_step_parity import arguments, step_parity  # noqa: E402
from torch_models import ResNet18  # noqa: E402


def export(model, sample, path):
    """BatchNorm kept as nodes (not folded into the convolutions), batch dim symbolic."""
    model.eval()
    torch.onnx.export(model, sample, path, input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}}, opset_version=13,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)


def main():
    args = arguments(__doc__.splitlines()[0]).parse_args()
    torch.manual_seed(args.seed)
    model = ResNet18(10)
    x = torch.rand(args.batch, 3, 32, 32)
    y = torch.randint(0, 10, (args.batch,))
    return step_parity("ResNet-18 (torchvision's), 10 classes", model, export, x, y, args)


if __name__ == "__main__":
    sys.exit(main())
