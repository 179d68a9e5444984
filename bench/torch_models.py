"""The benchmark networks in PyTorch, with the same stages and parameter names as
Quartet's model zoo (docs/models.md): the peers of bench/torch_train.py and
bench/torch_ddp.py. Import after any environment that must precede `import torch`."""

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


def build(name):
    if name == "mlp":
        return MLP(), (1, 28, 28), 10
    if name == "lenet5":
        return LeNet5(), (1, 28, 28), 10
    if name == "cnn":
        return CNN(), (1, 28, 28), 10
    side = int(name.split("-")[1])
    return Conv3dStack(), (1, side, side, side), 2
