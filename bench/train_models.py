#!/usr/bin/python3
"""Export the training benchmark models (random weights) with their data, for bench/train.sh.

Run with /usr/bin/python3: Debian's torch 1.13, onnx and numpy (python3-torch, python3-onnx).

usage: /usr/bin/python3 bench/train_models.py OUTDIR [MODEL ...]

Models (default: all), each into OUTDIR/<model>/ as model.onnx, X.npy, Y.npy and train.json:
  mlp    784-512-512-10 with ReLU; x float32 [N, 784]; X 8 batches of 128 (1024 rows);
         SGD lr 0.01 momentum 0.9.
  lenet  LeNet-5 style: Conv 5x5 6 ch, ReLU, MaxPool 2, Conv 5x5 16 ch, ReLU, MaxPool 2,
         Flatten, Linear 256-120-84-10 with ReLU; x float32 [N, 1, 28, 28]; 8 batches of 64;
         SGD lr 0.01 momentum 0.9.
  gpt    GPT-style decoder: 4 layers, d 256, 4 heads, T 128, vocab 256, token embedding
         (Gather) + a learned position embedding parameter [128, 256] (broadcast Add),
         pre-LayerNorm, separate q, k, v Linears (Transpose of the weight, MatMul, Add for
         a 3-D input), causal attention (an additive mask, a Constant node of 0 / -1e9),
         exact (erf) GELU MLP of 4d, final LayerNorm, LM head without bias; x int64 [N, 128]
         tokens, output logits reshaped to [N*128, 256] (dynamic axis "NT") so that the loss is
         cross-entropy on [N*T, V] against Y int64 [N, 128] flattened; 8 batches of 8;
         AdamW lr 3e-4 weight decay 0.01.
All: opset 17, no constant folding, eval mode (no Dropout, no BatchNorm), input "x" with batch
axis "N", output "logits"; the initializers are exactly the parameters, named as torch names them
(weights from torch.manual_seed(0); build(name) makes the same module again for
bench/train_torch.py; LayerNorm weights and biases get a little noise, since torch's eval-mode
export merges initializers of equal value). Y is next-token data for gpt (X shifted by one) and
random classes otherwise. train.json holds the batch size and optimizer settings both
benchmarks use: {"batch": B, "optimizer": "sgd"|"adamw", "lr", "momentum", "weight_decay"}.
"""
import json
import math
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.filterwarnings("ignore")

BATCHES = 8
SEQ, VOCAB, D, HEADS, LAYERS = 128, 256, 256, 4, 4


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 6, 5), nn.Conv2d(6, 16, 5)
        self.fc1, self.fc2, self.fc3 = nn.Linear(256, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)   # [N, 6, 12, 12]
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)   # [N, 16, 4, 4]
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc3(F.relu(self.fc2(x)))


class Block(nn.Module):
    def __init__(self, d, heads, seq):
        super().__init__()
        self.d, self.n_heads, self.seq = d, heads, seq
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.proj = (nn.Linear(d, d) for _ in range(4))
        self.fc, self.fc_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def heads(self, t):   # [N, T, D] -> [N, H, T, D/H]; -1 keeps the Reshape's shape constant
        return t.reshape(-1, self.seq, self.n_heads, self.d // self.n_heads).transpose(1, 2)

    def forward(self, h, mask):
        a = self.ln1(h)
        q, k, v = self.heads(self.q(a)), self.heads(self.k(a)), self.heads(self.v(a))
        scale = 1.0 / math.sqrt(self.d // self.n_heads)
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale + mask
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2)
        h = h + self.proj(ctx.reshape(-1, self.seq, self.d))
        return h + self.fc_proj(F.gelu(self.fc(self.ln2(h))))


class Gpt(nn.Module):
    """GPT-style decoder; tests/train/export_models.py uses a tiny one. Call init_gpt after."""

    def __init__(self, vocab=VOCAB, d=D, heads=HEADS, seq=SEQ, layers=LAYERS):
        super().__init__()
        self.vocab = vocab
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        self.blocks = nn.ModuleList(Block(d, heads, seq) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        # A plain attribute, not a buffer: the tracer writes it as a Constant node, so that the
        # initializers stay exactly the trainable parameters.
        self.mask = torch.full((seq, seq), -1e9).triu(1)

    def forward(self, x):
        h = self.tok(x) + self.pos
        for block in self.blocks:
            h = block(h, self.mask)
        return self.head(self.ln_f(h)).reshape(-1, self.vocab)


def init_gpt(m):
    """GPT-2's N(0, 0.02) for every matrix, the position embedding included."""
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
        # Not the default 1 / 0: torch's eval-mode export merges initializers of equal value,
        # which would tie all LayerNorm weights into one parameter.
        for mod in m.modules():
            if isinstance(mod, nn.LayerNorm):
                mod.weight.add_(0.02 * torch.randn_like(mod.weight))
                mod.bias.add_(0.02 * torch.randn_like(mod.bias))


# name: (class, x shape of one sample, batch, train settings)
SGD = {"optimizer": "sgd", "lr": 0.01, "momentum": 0.9, "weight_decay": 0.0}
MODELS = {
    "mlp": (Mlp, (784,), 128, SGD),
    "lenet": (LeNet, (1, 28, 28), 64, SGD),
    "gpt": (Gpt, (SEQ,), 8, {"optimizer": "adamw", "lr": 3e-4, "momentum": 0.0,
                             "weight_decay": 0.01}),
}


def build(name):
    """The model with its initial weights (the same every call)."""
    torch.manual_seed(0)
    model = MODELS[name][0]()
    if name == "gpt":
        init_gpt(model)
    return model


def make_data(name):
    _, sample, batch, _ = MODELS[name]
    rows = BATCHES * batch
    rng = np.random.default_rng(1)
    if name == "gpt":
        seq = rng.integers(0, VOCAB, size=(rows, SEQ + 1), dtype=np.int64)
        return seq[:, :-1].copy(), seq[:, 1:].copy()
    x = rng.standard_normal((rows,) + sample).astype(np.float32)
    return x, rng.integers(0, 10, size=rows, dtype=np.int64)


def export_onnx(model, example, path, out_axis="N"):
    # TrainingMode.PRESERVE of a model in eval mode exports the same inference graph as EVAL but
    # without torch's eval peephole, which would fold BatchNorm into the convolutions (and then
    # its parameters could not be trained).
    """The export every training model shares (tests/train/export_models.py too): opset 17, no
    constant folding (each parameter stays one initializer under its torch name), eval mode,
    input "x" with batch axis "N", output "logits" with dim 0 named out_axis; then checked."""
    model.eval()
    torch.onnx.export(model, example, path, opset_version=17, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.PRESERVE, input_names=["x"],
                      output_names=["logits"],
                      dynamic_axes={"x": {0: "N"}, "logits": {0: out_axis}})
    import onnx
    m = onnx.load(path)
    dims = m.graph.output[0].type.tensor_type.shape.dim
    if len(dims) == 2 and dims[1].dim_param:
        # torch names the -1 dim of a Reshape([-1, V]) output as if it were unknown; it is V.
        dims[1].Clear()
        with torch.no_grad():
            dims[1].dim_value = model(example).shape[1]
        onnx.save(m, path)
    check_initializers(m, path, model)


def export(name, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    model = build(name)
    x, y = make_data(name)
    export_onnx(model, torch.from_numpy(x[:2]), os.path.join(out_dir, "model.onnx"),
                "NT" if name == "gpt" else "N")
    np.save(os.path.join(out_dir, "X.npy"), x)
    np.save(os.path.join(out_dir, "Y.npy"), y)
    _, _, batch, settings = MODELS[name]
    with open(os.path.join(out_dir, "train.json"), "w") as f:
        json.dump(dict(batch=batch, **settings), f)


def check_initializers(m, path, model):
    """onnx.checker, and the initializers are exactly the parameters and BatchNorm's running
    statistics (which dlcc keeps as buffers): another buffer or a merged initializer would be
    trained (or tied) by dlcc."""
    import onnx
    onnx.checker.check_model(m)
    inits = sorted(i.name for i in m.graph.initializer)
    params = sorted([k for k, _ in model.named_parameters()] +
                    [k for k, _ in model.named_buffers() if k.endswith(("running_mean", "running_var"))])
    if inits != params:
        sys.exit("%s: initializers %s are not the parameters %s" % (path, inits, params))
    bad = {n.op_type for n in m.graph.node} & {"Dropout"}
    if bad:
        sys.exit("%s: contains %s" % (path, sorted(bad)))


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    names = sys.argv[2:] or list(MODELS)
    for name in names:
        if name not in MODELS:
            sys.exit("unknown model %r (known: %s)" % (name, " ".join(MODELS)))
    for name in names:
        export(name, os.path.join(sys.argv[1], name))
        print("exported %s to %s" % (name, os.path.join(sys.argv[1], name)))


if __name__ == "__main__":
    main()
