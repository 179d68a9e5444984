#!/usr/bin/python3
"""ResNet-18 exported from PyTorch to ONNX and imported by Quartet: the forward and one
SGD step against PyTorch from the same weights. torchvision's ResNet-18 (written out in
bench/torch_models.py, so torchvision is not needed: BasicBlock, [2, 2, 2, 2], its initialisation) with
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

import argparse
import os
import subprocess
import sys
import tempfile

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import ResNet18  # noqa: E402
from torch_parity import read_safetensors  # noqa: E402
from torch_step_parity import rel, write_safetensors  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--step", required=True, help="the quartet-bench-step binary")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tolerance", type=float, default=1e-5)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    model = ResNet18(10)
    x = torch.rand(args.batch, 3, 32, 32)
    y = torch.randint(0, 10, (args.batch,))
    with tempfile.TemporaryDirectory() as work:
        onnx_path = os.path.join(work, "resnet18.onnx")
        model.eval()
        torch.onnx.export(model, x[:1], onnx_path, input_names=["image"], output_names=["logits"],
                          dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}}, opset_version=13,
                          training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
        model.train()
        case, after = os.path.join(work, "case.safetensors"), os.path.join(work, "after.safetensors")
        state = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
        write_safetensors(case, {**state, "batch.x": x, "batch.y": y.float()})
        out = subprocess.run([args.step, case, "--model", "onnx:" + onnx_path, "--lr", str(args.lr), "--out", after],
                             capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"quartet-bench-step failed: {out.stderr.strip()}")
        # "<stage>.<initializer>": PyTorch's names follow the stage's.
        ours = {k.split(".", 1)[1] if k != "loss" and not k.startswith("grad.") else k: v
                for k, v in read_safetensors(after).items()}

    refs = {}
    for dtype in (torch.float32, torch.float64):
        ref = ResNet18(10)
        ref.load_state_dict(model.state_dict())
        ref = ref.to(dtype).train()
        loss = nn.functional.cross_entropy(ref(x.to(dtype)), y)
        loss.backward()
        with torch.no_grad():
            refs[dtype] = (float(loss), {n: (p - args.lr * p.grad) for n, p in ref.named_parameters()})
    print(f"ResNet-18 (torchvision's), 10 classes, batch {args.batch} x 3 x 32 x 32, SGD lr {args.lr}, "
          f"torch {torch.__version__}")
    print(f"loss: quartet {float(ours['loss']):.9f}, float32 {refs[torch.float32][0]:.9f}, "
          f"float64 {refs[torch.float64][0]:.9f}")
    worst = {torch.float32: 0.0, torch.float64: 0.0}
    floor = 0.0  # PyTorch's own float32 step against its float64 one: float32's rounding
    print(f"{'parameter after the step':40} {'vs float32':>11} {'vs float64':>11} {'torch f32 vs f64':>17}")
    for name in refs[torch.float64][1]:
        e = {d: rel(ours[name], refs[d][1][name]) for d in refs}
        own = rel(refs[torch.float32][1][name], refs[torch.float64][1][name])
        for d in e:
            worst[d] = max(worst[d], e[d])
        floor = max(floor, own)
        print(f"{name:40} {e[torch.float32]:11.2e} {e[torch.float64]:11.2e} {own:17.2e}")
    print(f"largest relative error of a parameter after the step: {worst[torch.float32]:.2e} vs float32, "
          f"{worst[torch.float64]:.2e} vs float64 (tolerance {args.tolerance:g}); PyTorch float32 vs float64: "
          f"{floor:.2e}")
    return 0 if max(worst.values()) <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
