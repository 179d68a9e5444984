"""Analytic FLOPs of one training step of bench/run's models, per sample.

Only the multiply-adds of linear layers, convolutions and attention's products are counted, at 2 FLOPs each:
  linear in -> out            forward 2 in out
  convolution cin -> cout     forward 2 cin cout (kernel volume) (output positions)
  transposed convolution      forward 2 cin cout (kernel volume) (input positions)
Backward computes the input gradient and the weight gradient, each as many FLOPs as
the forward pass, except for the first layer, whose input (the data) needs no gradient:
neither engine computes it. A training step is therefore 3x forward less the first
layer's input gradient. Left out, as small beside these: biases, activations, pooling,
normalisation, concatenation, the loss and the optimizer step.

    python3 bench/flops.py mlp cnn      prints "model forward train" per model
"""

import sys


def linear(n_in, n_out):
    return 2 * n_in * n_out


def conv(cin, cout, kernel_volume, positions):
    """positions: output positions for a convolution, input positions for a transposed one."""
    return 2 * cin * cout * kernel_volume * positions


def _unet3d(side, base=16, classes=3):
    """The registered unet3d: depth 3, 3^3 convolutions, 2^3 stride-2 transposed ones."""
    v = [(side // 2**k) ** 3 for k in range(3)]
    c = [base * 2**k for k in range(3)]
    return [conv(1, c[0], 27, v[0]), conv(c[0], c[0], 27, v[0]),       # enc1
            conv(c[0], c[1], 27, v[1]), conv(c[1], c[1], 27, v[1]),    # enc2
            conv(c[1], c[2], 27, v[2]), conv(c[2], c[2], 27, v[2]),    # bottleneck
            conv(c[2], c[1], 8, v[2]),                                 # dec2 up
            conv(2 * c[1], c[1], 27, v[1]), conv(c[1], c[1], 27, v[1]),
            conv(c[1], c[0], 8, v[1]),                                 # dec1 up
            conv(2 * c[0], c[0], 27, v[0]), conv(c[0], c[0], 27, v[0]),
            conv(c[0], classes, 1, v[0])]                              # head


def _gpt_mini(context=128, width=128, layers=4, vocab=256):
    """Per sample of `context` bytes: each block's four attention projections and two MLP
    matrices at every position, the two causal attention products (position t meets t+1
    others: q k^T and p v), and the head. The embeddings are lookups (0, listed first, so
    every counted layer's input gradient counts in train())."""
    positions = context * (context + 1) // 2  # the (t, s <= t) pairs of one sample
    block = [context * linear(width, width)] * 4 + [context * linear(width, 4 * width),
                                                    context * linear(4 * width, width),
                                                    2 * 2 * width * positions]
    return [0] + block * layers + [context * linear(width, vocab)]


def layers(model):
    """Forward FLOPs per sample of each counted layer, input first."""
    if model == "mlp":
        return [linear(784, 256), linear(256, 128), linear(128, 10)]
    if model == "lenet5":
        return [conv(1, 6, 25, 28 * 28), conv(6, 16, 25, 10 * 10),
                linear(400, 120), linear(120, 84), linear(84, 10)]
    if model == "cnn":
        return [conv(1, 32, 9, 28 * 28), conv(32, 64, 9, 14 * 14), linear(3136, 128), linear(128, 10)]
    if model == "gpt-mini":
        return _gpt_mini()
    kind, _, side = model.partition("-")
    if kind == "conv3d" and side in ("32", "64"):
        v = int(side) ** 3
        return [conv(1, 16, 27, v), conv(16, 32, 27, v), linear(32, 2)]
    if kind == "unet3d" and side in ("32", "64", "128"):
        return _unet3d(int(side))
    raise ValueError(f"unknown model {model!r}; known: mlp, lenet5, cnn, conv3d-32, conv3d-64, "
                     "unet3d-32, unet3d-64, unet3d-128, gpt-mini")


def forward(model):
    return sum(layers(model))


def train(model):
    """Forward, weight gradients, and input gradients of all layers but the first."""
    fwd = layers(model)
    return 3 * sum(fwd) - fwd[0]


if __name__ == "__main__":
    try:
        for name in sys.argv[1:]:
            print(name, forward(name), train(name))
    except ValueError as e:
        print(f"bench/flops.py: {e}", file=sys.stderr)
        sys.exit(2)
