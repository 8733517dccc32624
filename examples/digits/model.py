#!/usr/bin/python3
"""Export a small CNN for the 8x8 digits (make_data.py) to ONNX, randomly initialized.

Run with /usr/bin/python3: Debian's torch 1.13 and onnx (python3-torch, python3-onnx).

usage: /usr/bin/python3 examples/digits/model.py OUTDIR

Writes OUTDIR/model.onnx: input "x" float32 [N, 1, 8, 8], output "logits" [N, 10];
Conv 3x3 32 ch (pad 1) + ReLU + MaxPool 2, Conv 3x3 64 ch (pad 1) + ReLU + MaxPool 2, Flatten,
Linear 256 -> 128 + ReLU, Linear 128 -> 10 (53k parameters). PyTorch's default
initialization from torch.manual_seed(0); opset 17, no constant folding, so the initializers are
exactly the parameters (what `dlcc train` trains), named as torch names them.
"""
import os
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.filterwarnings("ignore")


class DigitsCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 2 * 2, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)   # [N, 32, 4, 4]
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)   # [N, 64, 2, 2]
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    os.makedirs(sys.argv[1], exist_ok=True)
    path = os.path.join(sys.argv[1], "model.onnx")
    torch.manual_seed(0)
    model = DigitsCnn().eval()
    torch.onnx.export(model, torch.zeros(1, 1, 8, 8), path, opset_version=17,
                      do_constant_folding=False, training=torch.onnx.TrainingMode.EVAL,
                      input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}})
    import onnx
    onnx.checker.check_model(onnx.load(path))
    print("wrote %s (%d parameters)" % (path, sum(p.numel() for p in model.parameters())))


if __name__ == "__main__":
    main()
