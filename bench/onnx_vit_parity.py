#!/usr/bin/python3
"""A small ViT exported from PyTorch to ONNX and imported by Quartet: the forward and one
SGD step against PyTorch from the same weights. The ViT of bench/torch_vit.py: patch 4,
width 192, depth 6, 3 heads, MLP 4x, pre-norm, a class token, a learned position
embedding, nn.GELU, on CIFAR-sized input (3 x 32 x 32), 10 classes; exported with the
TorchScript exporter at opset 17 with a symbolic batch dim (its reshapes become Shape
chains). quartet-bench-step takes one SGD step in float32 from a safetensors file of
PyTorch's weights and a batch, and PyTorch takes the same step in float32 and in float64.
Prints the logits' and each parameter's relative error after the step, ||quartet -
reference|| / ||reference||, against both; exits 1 when one passes --tolerance.

    /usr/bin/python3 bench/onnx_vit_parity.py --step build/bench/quartet-bench-step

Run it with Debian's /usr/bin/python3 (python3-torch) or a newer torch.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_step_parity import arguments, step_parity  # noqa: E402
from torch_vit import ViT, export  # noqa: E402


def main():
    args = arguments(__doc__.splitlines()[0]).parse_args()
    torch.manual_seed(args.seed)
    model = ViT(image=32, patch=4, channels=3, classes=10, dim=192, depth=6, heads=3, mlp_ratio=4)
    x = torch.rand(args.batch, 3, 32, 32)
    y = torch.randint(0, 10, (args.batch,))
    return step_parity("ViT (patch 4, width 192, depth 6, 3 heads), 10 classes", model, export, x, y, args)


if __name__ == "__main__":
    sys.exit(main())
