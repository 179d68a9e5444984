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
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_step_parity import arguments, step_parity  # noqa: E402


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision.models.resnet18(num_classes=...), the same modules, names and init."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(64, 2)
        self.layer2 = self._make_layer(128, 2, 2)
        self.layer3 = self._make_layer(256, 2, 2)
        self.layer4 = self._make_layer(512, 2, 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


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
