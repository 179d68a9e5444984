"""The benchmark networks in PyTorch, with the same stages and parameter names as
Quartet's model zoo (docs/models.md): the peers of bench/torch_train.py and
bench/torch_ddp.py, checked against Quartet by bench/torch_parity.py. Import after any environment that must precede `import torch`."""

import math

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
    """cnn; with hidden=2048, cnn-wide (the same stages and names, a wider fc1)."""

    def __init__(self, hidden=128):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.conv2 = nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.fc1 = nn.Sequential(nn.Flatten(), nn.Linear(3136, hidden), nn.ReLU())
        self.fc2 = nn.Sequential(nn.Linear(hidden, 10))

    def forward(self, x):
        for stage in (self.conv1, self.conv2, self.fc1, self.fc2):
            x = stage(x)
        return x


class ResidualFork(nn.Module):
    """First half of a basic block: x -> (relu(bn1(conv1(x))), shortcut(x))."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))
        else:
            self.shortcut = nn.Identity()

    def forward(self, x):
        return torch.relu(self.bn1(self.conv1(x))), self.shortcut(x)


class ResidualJoin(nn.Module):
    """Second half: (main, skip) -> relu(bn2(conv2(main)) + skip)."""

    def __init__(self, channels):
        super().__init__()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, main, skip):
        return torch.relu(self.bn2(self.conv2(main)) + skip)


class ResNetMini(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layer1a = ResidualFork(16, 16, 1)
        self.layer1b = ResidualJoin(16)
        self.layer2a = ResidualFork(16, 32, 2)
        self.layer2b = ResidualJoin(32)
        self.layer3a = ResidualFork(32, 64, 2)
        self.layer3b = ResidualJoin(64)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))

    def forward(self, x):
        x = self.stem(x)
        for fork, join in ((self.layer1a, self.layer1b), (self.layer2a, self.layer2b),
                           (self.layer3a, self.layer3b)):
            x = join(*fork(x))
        return self.head(x)


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
    """torchvision.models.resnet18(num_classes=...), the same modules, names and init
    (written out, so torchvision is not needed); Quartet's module-built twin is
    workloads::make_resnet18."""

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


class GptEmbed(nn.Module):
    def __init__(self, vocab, width, context):
        super().__init__()
        self.token = nn.Embedding(vocab, width)
        self.position = nn.Embedding(context, width)

    def forward(self, x):  # (N, T) byte values as floats
        return self.token(x.long()) + self.position(torch.arange(x.shape[1], device=x.device))


def causal_attention(q, k, v):
    """(N, H, T, Dh) each; PyTorch's fused kernel where this torch has it (2.0 on)."""
    if hasattr(nn.functional, "scaled_dot_product_attention"):
        return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[-2]
    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return s.softmax(-1) @ v


class GptAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = (nn.Linear(width, width) for _ in range(3))
        self.out = nn.Linear(width, width)

    def forward(self, x):
        n, t, c = x.shape
        split = lambda y: y.view(n, t, self.heads, c // self.heads).transpose(1, 2)  # noqa: E731
        a = causal_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)))
        return self.out(a.transpose(1, 2).reshape(n, t, c))


class GptBlock(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = GptAttention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Module()
        self.mlp.up = nn.Linear(width, 4 * width)
        self.mlp.down = nn.Linear(4 * width, width)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp.down(nn.functional.gelu(self.mlp.up(self.ln2(x))))


class GptHead(nn.Module):
    def __init__(self, width, vocab):
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.out = nn.Linear(width, vocab)

    def forward(self, x):  # (N * T, vocab): a row per position
        return self.out(self.ln(x)).reshape(-1, self.out.out_features)


class Gpt(nn.Module):
    """gpt-mini: stages embed, block0..block3, head."""

    def __init__(self, layers=4, heads=4, width=128, context=128, vocab=256):
        super().__init__()
        self.embed = GptEmbed(vocab, width, context)
        self.stage_names = ["embed"] + [f"block{i}" for i in range(layers)] + ["head"]
        for i in range(layers):
            setattr(self, f"block{i}", GptBlock(width, heads))
        self.head = GptHead(width, vocab)

    def forward(self, x):
        for name in self.stage_names:
            x = getattr(self, name)(x)
        return x


class MoeExpert(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return self.down(nn.functional.gelu(self.up(x)))


class MoeMlp(nn.Module):
    """E experts, top-k routing, capacity ceil(cf * R * k / E) per expert (first choices
    before second ones, each in token order), the Switch load-balancing loss
    alpha * E * sum_i f_i * P_i plus the router z-loss beta * mean(logsumexp(logits)^2)
    (ST-MoE) kept in self.aux after each forward."""

    def __init__(self, width, experts=4, top_k=2, capacity_factor=1.25, aux_loss=0.01, z_loss=0.001):
        super().__init__()
        self.router = nn.Linear(width, experts, bias=False)
        self.experts = nn.ModuleList(MoeExpert(width) for _ in range(experts))
        self.top_k, self.capacity_factor, self.aux_loss = top_k, capacity_factor, aux_loss
        self.z_loss = z_loss
        self.aux = None

    def forward(self, x):
        n, t, c = x.shape
        rows, e, k = n * t, len(self.experts), self.top_k
        x = x.reshape(rows, c)
        logits = self.router(x)
        probs = logits.softmax(-1)
        gates, chosen = probs.topk(k, dim=-1)  # falling order
        if k > 1:
            gates = gates / gates.sum(-1, keepdim=True)
        cap = math.ceil(self.capacity_factor * rows * k / e) if self.capacity_factor > 0 else rows
        keep = torch.zeros(rows, k, dtype=torch.bool, device=x.device)
        taken = [0] * e
        for j in range(k):  # first choices first, each in token order
            for r, ex in enumerate(chosen[:, j].tolist()):
                if taken[ex] < cap:
                    taken[ex] += 1
                    keep[r, j] = True
        out = torch.zeros_like(x)
        for ex, expert in enumerate(self.experts):
            r, j = ((chosen == ex) & keep).nonzero(as_tuple=True)
            if len(r):
                out = out.index_add(0, r, gates[r, j, None] * expert(x[r]))
        f = torch.bincount(chosen[:, 0], minlength=e).to(probs.dtype) / rows
        self.aux = self.aux_loss * e * (f * probs.mean(0)).sum()
        self.aux = self.aux + self.z_loss * logits.logsumexp(-1).square().mean()
        return out.reshape(n, t, c)


class GptMoeBlock(GptBlock):
    def __init__(self, width, heads, **moe):
        super().__init__(width, heads)
        del self.mlp
        self.moe = MoeMlp(width, **moe)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.moe(self.ln2(x))


class GptMoe(Gpt):
    """gpt-moe: gpt-mini with the MLP of blocks every-1, 2 every-1, ... a mixture of
    experts; loss = cross-entropy + aux_losses()."""

    def __init__(self, layers=4, heads=4, width=128, context=128, vocab=256, every=2, **moe):
        super().__init__(layers, heads, width, context, vocab)
        for i in range(layers):
            if i % every == every - 1:
                setattr(self, f"block{i}", GptMoeBlock(width, heads, **moe))

    def aux_losses(self):
        return sum(m.aux for m in self.modules() if isinstance(m, MoeMlp) and m.aux is not None)


def build(name):
    """(model, sample shape, classes, labels per sample): one label per voxel for unet3d, per
    position for gpt-mini."""
    if name == "mlp":
        return MLP(), (1, 28, 28), 10, ()
    if name == "lenet5":
        return LeNet5(), (1, 28, 28), 10, ()
    if name == "cnn":
        return CNN(), (1, 28, 28), 10, ()
    if name == "cnn-wide":
        return CNN(hidden=2048), (1, 28, 28), 10, ()
    if name == "resnet-mini":
        return ResNetMini(), (1, 28, 28), 10, ()
    if name == "resnet18":
        return ResNet18(10), (3, 32, 32), 10, ()
    if name == "gpt-mini":
        return Gpt(), (128,), 256, (128,)
    if name == "gpt-moe":
        return GptMoe(), (128,), 256, (128,)
    kind, side = name.split("-")
    side = int(side)
    if kind == "unet3d":
        return UNet3d(), (1, side, side, side), 3, (side, side, side)
    return Conv3dStack(), (1, side, side, side), 2, ()
