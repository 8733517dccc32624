#!/usr/bin/python3
"""Regenerates models/default.onnx, the small CNN that `make demo` runs: conv-bn-relu blocks, a
residual add, global pooling and a classifier on 1x3x32x32 inputs. Random weights from a fixed
seed (nothing is downloaded). Needs Debian's python3-torch (run with /usr/bin/python3)."""
import sys
import torch
import torch.nn as nn


class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                   nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16))
        self.down = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        return torch.softmax(self.head(self.down(x)), dim=1)


def main(out):
    torch.manual_seed(0)
    net = SmallNet().eval()
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    x = torch.randn(1, 3, 32, 32)
    torch.onnx.export(net, x, out, input_names=["image"], output_names=["probs"],
                      dynamic_axes={"image": {0: "batch"}, "probs": {0: "batch"}}, opset_version=13)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "models/default.onnx")
