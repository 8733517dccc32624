#!/usr/bin/python3
"""Export the training parity models and PyTorch's per-step losses for `dlcc train`.

Run with /usr/bin/python3: Debian's torch 1.13, onnx and numpy (python3-torch, python3-onnx).

usage: /usr/bin/python3 tests/train/export_models.py OUTDIR

Models:
  mlp   Linear 64-32, ReLU, Linear 32-10; x float32 [N, 64]
  cnn   Conv 3x3 8 ch pad 1, ReLU, MaxPool 2, Conv 3x3 16 ch, ReLU, Flatten, Linear 64-10;
        x float32 [N, 1, 8, 8]
  cnn_bn  cnn with BatchNorm after each convolution (train mode: batch statistics; the
        running statistics are checked through sgd_params.npz and sgd_logits.npy)
  gpt   bench/train_models.py's GPT-style decoder, tiny: 2 layers, d 16, 2 heads, T 8, vocab 16
        (Gather, LayerNormalization, MatMul, Softmax, an additive causal mask Constant, erf
        GELU, Reshape, Transpose); x int64 [N, 8] tokens, output logits [N*8, 16] (axis "NT"),
        labels int64 [N, 8] (flattened by the loss)
Writes, for each, into OUTDIR/<model>/:
  model.onnx    the initial weights (torch.manual_seed(0)); exported by bench/train_models.py's
                export_onnx: opset 17, no constant folding, input "x" with a dynamic batch axis
                "N", output "logits"; the initializers are exactly the parameters, named as
                torch names them (fc1.weight, conv1.bias, ...). No Dropout, no BatchNorm.
  X.npy         320 rows (20 batches of 16)
  Y.npy         int64, 320 rows: mlp and cnn class labels 0..9 (a fixed random linear
                "teacher" of X, so that the losses go down), gpt the next token
  losses.json   {"sgd": [20 floats], "adamw": [...], "sgd_nesterov": [...], "adamw_wd": [...],
                "adam": [...], and each again as "<name>_float64"}: the cross-entropy (mean) of
                step k = 1..20 on rows [16(k-1), 16k), computed before that step's update, from
                the same initial weights, in float32 (the *_float64 runs only tell how much of a
                difference is rounding). The optimizers (torch.optim), OPTIMIZERS below:
                  sgd           SGD(lr=0.05, momentum=0.9)
                  adamw         AdamW(lr=1e-3, weight_decay=0.01)
                  sgd_nesterov  SGD(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)
                  adamw_wd      AdamW(lr=1e-2, weight_decay=0.1)
                  adam          Adam(lr=1e-2, weight_decay=0.1)
                The last three exist because at lr 1e-3 / decay 0.01 a missing or misapplied
                weight decay moves 20 losses by less than the 1e-4 the test allows; with these
                it moves them by 6e-4 to 8e-2.
  sgd_logits.npy  float32: the model's output on all of X after the 20 SGD steps, and
  sgd_params.npz  the parameters after them, by name: to check what `dlcc train --export`
                writes (parameter by parameter: SGD is linear in the gradient, so rounding
                stays rounding, which AdamW's normalization does not promise).
"""
import json
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.dont_write_bytecode = True   # no __pycache__ left in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from train_models import Gpt, export_onnx  # noqa: E402

warnings.filterwarnings("ignore")

ROWS, BATCH, STEPS, CLASSES = 320, 16, 20, 10
OPTIMIZERS = {   # name: (torch.optim class, arguments); parity.py has the dlcc flags
    "sgd": ("SGD", dict(lr=0.05, momentum=0.9)),
    "adamw": ("AdamW", dict(lr=1e-3, weight_decay=0.01)),
    "sgd_nesterov": ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    "adamw_wd": ("AdamW", dict(lr=1e-2, weight_decay=0.1)),
    "adam": ("Adam", dict(lr=1e-2, weight_decay=0.1)),
}


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(64, 32), nn.Linear(32, CLASSES)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)    # [N,8,8,8] -> pool -> [N,8,4,4]
        self.conv2 = nn.Conv2d(8, 16, 3)              # [N,16,2,2]
        self.fc = nn.Linear(16 * 2 * 2, CLASSES)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        return self.fc(torch.flatten(F.relu(self.conv2(x)), 1))


class CnnBn(nn.Module):
    """Cnn with BatchNorm after each convolution: trained with batch statistics (train mode);
    the running statistics it updates are checked through the exported model's outputs."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3), nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 2 * 2, CLASSES)
        with torch.no_grad():   # distinct affine values: torch's export merges equal initializers
            for bn in (self.bn1, self.bn2):
                bn.weight.add_(0.1 * torch.randn_like(bn.weight))
                bn.bias.add_(0.1 * torch.randn_like(bn.bias))
                bn.running_mean.add_(0.1 * torch.randn_like(bn.running_mean))
                bn.running_var.add_(0.1 * torch.rand_like(bn.running_var))

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        return self.fc(torch.flatten(F.relu(self.bn2(self.conv2(x))), 1))


class TinyGpt(Gpt):
    SEQ, VOCAB = 8, 16

    def __init__(self):
        super().__init__(vocab=self.VOCAB, d=16, heads=2, seq=self.SEQ, layers=2)
        # torch's default Linear / Embedding init, not GPT-2's N(0, 0.02): with it the attention
        # is far from uniform, so that every parameter's gradient moves the losses measurably.
        # LayerNorm affine and positions random: torch's eval export merges equal initializers.
        with torch.no_grad():
            self.pos.normal_(0.0, 0.5)
            for mod in self.modules():
                if isinstance(mod, nn.LayerNorm):
                    mod.weight.add_(0.1 * torch.randn_like(mod.weight))
                    mod.bias.add_(0.1 * torch.randn_like(mod.bias))


MODELS = {"mlp": (Mlp, (64,)), "cnn": (Cnn, (1, 8, 8)), "gpt": (TinyGpt, (TinyGpt.SEQ,)),
          "cnn_bn": (CnnBn, (1, 8, 8))}


def make_data(name, sample_shape, seed):
    rng = np.random.default_rng(seed)
    if name == "gpt":
        seq = rng.integers(0, TinyGpt.VOCAB, size=(ROWS, TinyGpt.SEQ + 1), dtype=np.int64)
        return seq[:, :-1].copy(), seq[:, 1:].copy()
    x = rng.standard_normal((ROWS,) + sample_shape).astype(np.float32)
    teacher = rng.standard_normal((int(np.prod(sample_shape)), CLASSES))
    y = np.argmax(x.reshape(ROWS, -1) @ teacher, axis=1).astype(np.int64)
    return x, y


def train_losses(cls, state, x, y, opt_name, dtype):
    """Per-step losses of STEPS steps on consecutive batches, no shuffling; the final model."""
    model = cls().to(dtype)
    model.load_state_dict(state)
    model.train()
    opt_class, opt_args = OPTIMIZERS[opt_name]
    opt = getattr(torch.optim, opt_class)(model.parameters(), **opt_args)
    xt = torch.from_numpy(x)
    xt, yt = xt.to(dtype) if xt.is_floating_point() else xt, torch.from_numpy(y)
    losses = []
    for k in range(STEPS):
        rows = slice(k * BATCH, (k + 1) * BATCH)
        loss = F.cross_entropy(model(xt[rows]), yt[rows].reshape(-1))
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return losses, model


def export_model(name, out_dir):
    cls, sample_shape = MODELS[name]
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    model = cls()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = make_data(name, sample_shape, seed=1 + list(MODELS).index(name))
    export_onnx(model, torch.from_numpy(x[:BATCH]), os.path.join(out_dir, "model.onnx"),
                "NT" if name == "gpt" else "N")
    np.save(os.path.join(out_dir, "X.npy"), x)
    np.save(os.path.join(out_dir, "Y.npy"), y)
    result = {}
    for opt_name in OPTIMIZERS:
        result[opt_name], trained = train_losses(cls, state, x, y, opt_name, torch.float32)
        if opt_name == "sgd":
            with torch.no_grad():
                logits = trained.eval()(torch.from_numpy(x)).numpy()
            np.save(os.path.join(out_dir, "sgd_logits.npy"), logits)
            bufs = {k: v for k, v in trained.named_buffers() if k.endswith(("running_mean", "running_var"))}
            np.savez(os.path.join(out_dir, "sgd_params.npz"),
                     **{k: v.detach().numpy() for k, v in list(trained.named_parameters()) + list(bufs.items())})
        state64 = {k: v.double() for k, v in state.items()}
        result[opt_name + "_float64"], _ = train_losses(cls, state64, x, y, opt_name,
                                                        torch.float64)
    with open(os.path.join(out_dir, "losses.json"), "w") as f:
        json.dump(result, f, indent=1)


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    torch.set_num_threads(1)   # the same summation order on any machine
    for name in MODELS:
        export_model(name, os.path.join(sys.argv[1], name))


if __name__ == "__main__":
    main()
