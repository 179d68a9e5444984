"""The benchmark networks in PyTorch, with the same stages and parameter names as
Quartet's model zoo (docs/models.md): the peers of bench/torch_train.py and
bench/torch_ddp.py. Import after any environment that must precede `import torch`."""

import torch
import torch.nn as nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU())
        self.fc2 = nn.Sequential(nn.Linear(256, 128), nn.ReLU())
        self.fc3 = nn.Sequential(nn.Linear(128, 10))

    def forward(self, x):
        return self.fc3(self.fc2(self.fc1(x)))


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2))
        self.conv2 = nn.Sequential(nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2))
        self.fc1 = nn.Sequential(nn.Flatten(), nn.Linear(400, 120), nn.ReLU())
        self.fc2 = nn.Sequential(nn.Linear(120, 84), nn.ReLU())
        self.fc3 = nn.Sequential(nn.Linear(84, 10))

    def forward(self, x):
        for stage in (self.conv1, self.conv2, self.fc1, self.fc2, self.fc3):
            x = stage(x)
        return x


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.conv2 = nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.fc1 = nn.Sequential(nn.Flatten(), nn.Linear(3136, 128), nn.ReLU())
        self.fc2 = nn.Sequential(nn.Linear(128, 10))

    def forward(self, x):
        for stage in (self.conv1, self.conv2, self.fc1, self.fc2):
            x = stage(x)
        return x


class Conv3dStack(nn.Module):
    """conv3d 1->16, 16->32 (3^3, padding 1, ReLU), global average pool, linear 32->2."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv3d(1, 16, 3, padding=1), nn.ReLU(),
                                      nn.Conv3d(16, 32, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3, 4)))


def conv_block(cin, cout):
    return nn.Sequential(
        nn.Conv3d(cin, cout, 3, padding=1, bias=False), nn.InstanceNorm3d(cout, affine=True), nn.LeakyReLU(0.01),
        nn.Conv3d(cout, cout, 3, padding=1, bias=False), nn.InstanceNorm3d(cout, affine=True), nn.LeakyReLU(0.01))


class Down(nn.Module):
    """(e1 .. e(k-1)) -> (e1 .. e(k-1), block(pool(e(k-1))))"""

    def __init__(self, cin, cout):
        super().__init__()
        self.pool = nn.MaxPool3d(2)
        self.block = conv_block(cin, cout)

    def forward(self, *skips):
        return (*skips, self.block(self.pool(skips[-1])))


class Up(nn.Module):
    """(e1 .. ek, h) -> (e1 .. e(k-1), block(cat(ek, up(h))))"""

    def __init__(self, cin, cout):
        super().__init__()
        self.up = nn.ConvTranspose3d(cin, cout, 2, stride=2)
        self.block = conv_block(2 * cout, cout)

    def forward(self, *xs):
        *skips, skip, h = xs
        return (*skips, self.block(torch.cat([skip, self.up(h)], dim=1)))


class UNet3d(nn.Module):
    """The registered unet3d (docs/models.md): depth 3, base 16, InstanceNorm, 1 -> 3."""

    def __init__(self, in_channels=1, classes=3, base=16, depth=3):
        super().__init__()
        c = [base * 2**k for k in range(depth)]
        self.stage_names = ["enc1"]
        self.enc1 = conv_block(in_channels, c[0])
        for k in range(2, depth + 1):
            name = "bottleneck" if k == depth else f"enc{k}"
            setattr(self, name, Down(c[k - 2], c[k - 1]))
            self.stage_names.append(name)
        for k in range(depth - 1, 0, -1):
            setattr(self, f"dec{k}", Up(c[k], c[k - 1]))
            self.stage_names.append(f"dec{k}")
        self.head = nn.Sequential(nn.Conv3d(c[0], classes, 1))
        self.stage_names.append("head")

    def forward(self, x):
        xs = (self.enc1(x),)
        for name in self.stage_names[1:-1]:
            xs = getattr(self, name)(*xs)
        return self.head(xs[0])


def build(name):
    """(model, sample shape, classes, labels per sample): one label per voxel for unet3d."""
    if name == "mlp":
        return MLP(), (1, 28, 28), 10, ()
    if name == "lenet5":
        return LeNet5(), (1, 28, 28), 10, ()
    if name == "cnn":
        return CNN(), (1, 28, 28), 10, ()
    kind, side = name.split("-")
    side = int(side)
    if kind == "unet3d":
        return UNet3d(), (1, side, side, side), 3, (side, side, side)
    return Conv3dStack(), (1, side, side, side), 2, ()
