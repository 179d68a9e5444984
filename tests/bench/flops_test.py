"""bench/flops.py's FLOP counts against hand-worked values (run by ctest as bench.flops)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import flops  # noqa: E402


class FlopsTest(unittest.TestCase):
    def test_mlp_forward_is_two_flops_per_weight(self):
        # 784-256-128-10: 200704 + 32768 + 1280 = 234752 weights
        self.assertEqual(flops.forward("mlp"), 2 * (784 * 256 + 256 * 128 + 128 * 10))
        self.assertEqual(flops.forward("mlp"), 469504)

    def test_mlp_train_skips_the_data_gradient(self):
        # forward + weight gradients + input gradients of fc2 and fc3 only
        self.assertEqual(flops.train("mlp"), 3 * 469504 - 2 * 784 * 256)
        self.assertEqual(flops.train("mlp"), 1007104)

    def test_one_conv_layer(self):
        # cnn's conv2: 32 -> 64 channels, 3x3, padding 1 on 14x14: 14*14 output positions
        self.assertEqual(flops.conv(32, 64, 3 * 3, 14 * 14), 2 * 32 * 64 * 9 * 196)
        self.assertEqual(flops.conv(32, 64, 3 * 3, 14 * 14), 7225344)
        self.assertEqual(flops.layers("cnn")[1], 7225344)

    def test_conv3d_stack_grows_with_the_volume(self):
        # every layer but the 32 -> 2 head scales with the voxels: 64^3 is 8x 32^3
        head = 3 * flops.linear(32, 2)
        self.assertEqual(flops.train("conv3d-64") - head, 8 * (flops.train("conv3d-32") - head))

    def test_unknown_model_names_the_known_ones(self):
        with self.assertRaisesRegex(ValueError, "unknown model 'vgg'; known: mlp"):
            flops.layers("vgg")


if __name__ == "__main__":
    unittest.main()
