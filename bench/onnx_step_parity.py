"""What bench/onnx_resnet18_parity.py and bench/onnx_vit_parity.py share: a PyTorch model
exported to ONNX, and one SGD step of it taken by quartet-bench-step (float32, from a
safetensors file of PyTorch's weights and a batch) and by PyTorch in float32 and float64
from the same weights and batch. Prints the forward's and each parameter's relative
error after the step, ||quartet - reference|| / ||reference||, against both, and
PyTorch's own float32-vs-float64 error (float32's floor), and how near a ReLU's input came
to its kink at 0: where one lies within float32's rounding of 0, two computations may
take different sides of it, and one element's gradient passes in one and not the other,
so no bound of the order of float32's rounding holds for that draw. The script counts the
ReLU inputs that PyTorch's float32 forward puts on the other side of 0 than its float64
one."""

import argparse
import copy
import os
import subprocess
import sys
import tempfile

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_parity import read_safetensors  # noqa: E402
from torch_step_parity import rel, write_safetensors  # noqa: E402


def arguments(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--step", required=True, help="the quartet-bench-step binary")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tolerance", type=float, default=1e-5)
    return p


def relu_signs(model, x):
    """Every ReLU call's input > 0 in model(x), in call order."""
    signs = []
    hooks = [m.register_forward_pre_hook(lambda _m, inputs: signs.append(inputs[0].detach() > 0))
             for m in model.modules() if isinstance(m, nn.ReLU)]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return signs


def step_parity(title, model, export, x, y, args):
    """model: a PyTorch module; export(model, sample, path) writes it as ONNX. Returns the
    exit code: 0 when every parameter's error is within args.tolerance of both references."""
    with tempfile.TemporaryDirectory() as work:
        onnx_path = os.path.join(work, "model.onnx")
        export(model, x[:1], onnx_path)
        model.train()
        case, after = os.path.join(work, "case.safetensors"), os.path.join(work, "after.safetensors")
        state = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
        write_safetensors(case, {**state, "batch.x": x, "batch.y": y.float()})
        out = subprocess.run([args.step, case, "--model", "onnx:" + onnx_path, "--lr", str(args.lr), "--out", after],
                             capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"quartet-bench-step failed: {out.stderr.strip()}")
        # "<stage>.<initializer>": PyTorch's names follow the stage's.
        ours = {k.split(".", 1)[1] if "." in k and not k.startswith("grad.") else k: v
                for k, v in read_safetensors(after).items()}

    refs = {}
    for dtype in (torch.float32, torch.float64):
        ref = copy.deepcopy(model).to(dtype).train()
        logits = ref(x.to(dtype))
        loss = nn.functional.cross_entropy(logits, y)
        loss.backward()
        with torch.no_grad():
            refs[dtype] = (float(loss), logits.detach(), {n: (p - args.lr * p.grad) for n, p in ref.named_parameters()})
    f32, f64 = refs[torch.float32], refs[torch.float64]
    print(f"{title}, batch {args.batch} x {' x '.join(map(str, x.shape[1:]))}, SGD lr {args.lr}, "
          f"torch {torch.__version__}")
    print(f"loss: quartet {float(ours['loss']):.9f}, float32 {f32[0]:.9f}, float64 {f64[0]:.9f}")
    print(f"forward (logits): {rel(ours['logits'], f32[1]):.2e} vs float32, {rel(ours['logits'], f64[1]):.2e} vs "
          f"float64; PyTorch float32 vs float64: {rel(f32[1], f64[1]):.2e}")
    worst = {torch.float32: 0.0, torch.float64: 0.0}
    floor = 0.0  # PyTorch's own float32 step against its float64 one: float32's rounding
    print(f"{'parameter after the step':40} {'vs float32':>11} {'vs float64':>11} {'torch f32 vs f64':>17}")
    for name in f64[2]:
        e = {d: rel(ours[name], refs[d][2][name]) for d in refs}
        own = rel(f32[2][name], f64[2][name])
        for d in e:
            worst[d] = max(worst[d], e[d])
        floor = max(floor, own)
        print(f"{name:40} {e[torch.float32]:11.2e} {e[torch.float64]:11.2e} {own:17.2e}")
    print(f"largest relative error of a parameter after the step: {worst[torch.float32]:.2e} vs float32, "
          f"{worst[torch.float64]:.2e} vs float64 (tolerance {args.tolerance:g}); PyTorch float32 vs float64: "
          f"{floor:.2e}")
    # ReLU inputs on the other side of 0 in PyTorch's float32 forward than in its float64 one.
    flips = sum(int((a != b).sum()) for a, b in zip(relu_signs(copy.deepcopy(model).float().train(), x.float()),
                                                    relu_signs(copy.deepcopy(model).double().train(), x.double())))
    if flips:
        print(f"PyTorch's float32 forward puts {flips} ReLU input(s) on the other side of 0 than its float64 one: "
              "this draw sits at a kink, where float32 computations differ by far more than their rounding")
    return 0 if max(worst.values()) <= args.tolerance else 1
