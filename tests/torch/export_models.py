#!/usr/bin/python3
"""Export PyTorch models to ONNX, with inputs and PyTorch's outputs, for dlcc parity tests.

usage: export_models.py OUT_DIR [MODEL ...]

Models (default: all of them):
  resnet50            torchvision resnet50, eval, 1x3x224x224, opset 14
  mobilenet_v2        torchvision mobilenet_v2, eval, 1x3x224x224, opset 14
  mobilenet_v2_bn     the same model and input, exported with training=TrainingMode.PRESERVE so
                      the BatchNormalization nodes stay in the graph (an eval-mode export folds
                      every BatchNorm into the preceding Conv, so dlcc's own BatchNorm kernel and
                      Conv+BN folding would otherwise never be exercised)
  conv_decoder        a convolutional decoder (DCGAN-style generator with a U-Net skip):
                      ConvTranspose2d 4x4 stride 2 pad 1, 2x2 stride 2, grouped 3x3 stride 2
                      with output_padding, stride 1 with dilation, BatchNorm, ReLU, Tanh, and
                      Resizes (interpolate: nearest x4, bilinear x1.5, bilinear with
                      align_corners to 50x90); eval, 2x32x6x6, opset 14
  bert_encoder        small BERT-style encoder (plain torch.nn), opset 14 (LayerNorm decomposed)
  bert_encoder_op17   the same model at opset 17 (LayerNorm exported as LayerNormalization);
                      only written when this torch can export opset 17

Everything uses random weights from a fixed seed; nothing is downloaded. For each model it writes
  OUT_DIR/<model>/model.onnx
  OUT_DIR/<model>/inputs/<input>.npy
  OUT_DIR/<model>/expected/<sanitized output name>.npy   (float32, eval mode, torch.no_grad)
  OUT_DIR/<model>/manifest.json  {"name", "opset", "inputs": [{"name", "file"}], "outputs": [...]}
Output file names are sanitized the way `dlcc run --output-dir` names them: characters outside
[A-Za-z0-9._-] become '_'.
"""
import json
import math
import os
import re
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn

warnings.filterwarnings("ignore")

SEED = 1234


def sanitize(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


# ----------------------------------------------------------------------------------------------
# CNNs (torchvision)

def randomize_batchnorm(model, gen):
    """Give every BatchNorm non-trivial statistics and affine parameters, so that a wrong
    BatchNorm (or a wrong Conv+BN folding) cannot go unnoticed. The values stay in a sane range
    so that 50 layers of them do not blow activations up to inf or shrink them to nothing."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(c, generator=gen) * 0.2)
                m.running_var.copy_(torch.rand(c, generator=gen) * 1.5 + 0.5)   # [0.5, 2)
                m.weight.copy_(torch.rand(c, generator=gen) * 0.5 + 0.75)       # [0.75, 1.25)
                m.bias.copy_(torch.randn(c, generator=gen) * 0.1)


def make_resnet50():
    import torchvision
    torch.manual_seed(SEED)
    m = torchvision.models.resnet50(weights=None)
    gen = torch.Generator().manual_seed(SEED + 1)
    randomize_batchnorm(m, gen)
    m.eval()
    x = torch.randn(1, 3, 224, 224, generator=gen)
    return m, {"input": x}, ["output"], None


def make_mobilenet_v2():
    import torchvision
    torch.manual_seed(SEED)
    m = torchvision.models.mobilenet_v2(weights=None)
    gen = torch.Generator().manual_seed(SEED + 2)
    randomize_batchnorm(m, gen)
    m.eval()
    x = torch.randn(1, 3, 224, 224, generator=gen)
    return m, {"input": x}, ["output"], None


class ConvDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.up1 = nn.ConvTranspose2d(32, 24, 4, stride=2, padding=1)  # 6 -> 12
        self.bn1 = nn.BatchNorm2d(24)
        self.up2 = nn.ConvTranspose2d(24, 16, 2, stride=2, bias=False)  # 12 -> 24
        self.skip = nn.ConvTranspose2d(32, 16, 4, stride=4)  # the input straight to 24
        self.up3 = nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1,
                                      groups=2)  # 24 -> 48
        self.mix = nn.ConvTranspose2d(8, 3, 3, padding=2, dilation=2)  # stride 1: 48 -> 48
        self.lat = nn.Conv2d(32, 16, 1)

    def forward(self, x):
        h = torch.relu(self.bn1(self.up1(x)))
        lateral = nn.functional.interpolate(self.lat(x), scale_factor=4, mode="nearest")
        h = torch.relu(self.up2(h) + self.skip(x) + lateral)
        y = torch.tanh(self.mix(torch.relu(self.up3(h))))
        y = nn.functional.interpolate(y, scale_factor=1.5, mode="bilinear", align_corners=False)
        return nn.functional.interpolate(y, size=(50, 90), mode="bilinear", align_corners=True)


def make_conv_decoder():
    torch.manual_seed(SEED)
    m = ConvDecoder()
    gen = torch.Generator().manual_seed(SEED + 5)
    randomize_batchnorm(m, gen)
    m.eval()
    x = torch.randn(2, 32, 6, 6, generator=gen)
    return m, {"input": x}, ["output"], None


# ----------------------------------------------------------------------------------------------
# BERT-style encoder in plain torch.nn

HIDDEN, HEADS, INTER, VOCAB, SEQ, BATCH, LAYERS, MAX_POS, TYPES = 128, 4, 512, 1000, 32, 2, 2, 64, 2
LN_EPS = 1e-12


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = HEADS
        self.head_dim = HIDDEN // HEADS
        self.query = nn.Linear(HIDDEN, HIDDEN)
        self.key = nn.Linear(HIDDEN, HIDDEN)
        self.value = nn.Linear(HIDDEN, HIDDEN)
        self.out = nn.Linear(HIDDEN, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN, eps=LN_EPS)

    def split(self, x):
        # (B, S, H*D) -> (B, H, S, D); batch size stays symbolic in the exported graph.
        b, s = x.size(0), x.size(1)
        return x.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, h, mask_add):
        q = self.split(self.query(h))
        k = self.split(self.key(h))
        v = self.split(self.value(h))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores + mask_add
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        ctx = ctx.view(ctx.size(0), ctx.size(1), HIDDEN)
        return self.norm(self.out(ctx) + h)


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = SelfAttention()
        self.fc1 = nn.Linear(HIDDEN, INTER)
        self.act = nn.GELU()            # exact (erf) GELU
        self.fc2 = nn.Linear(INTER, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN, eps=LN_EPS)

    def forward(self, h, mask_add):
        h = self.attn(h, mask_add)
        return self.norm(self.fc2(self.act(self.fc1(h))) + h)


class BertEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(VOCAB, HIDDEN)
        self.position = nn.Embedding(MAX_POS, HIDDEN)
        self.segment = nn.Embedding(TYPES, HIDDEN)
        self.emb_norm = nn.LayerNorm(HIDDEN, eps=LN_EPS)
        self.layers = nn.ModuleList([EncoderLayer() for _ in range(LAYERS)])
        self.pooler = nn.Linear(HIDDEN, HIDDEN)
        self.register_buffer("position_ids", torch.arange(MAX_POS).unsqueeze(0), persistent=False)

    def forward(self, input_ids, attention_mask, token_type_ids):
        seq = input_ids.size(1)
        pos = self.position_ids[:, :seq]
        h = self.word(input_ids) + self.position(pos) + self.segment(token_type_ids)
        h = self.emb_norm(h)
        # additive mask: 0 where attended, -10000 where masked; shape (B, 1, 1, S)
        mask_add = (1.0 - attention_mask[:, None, None, :].to(h.dtype)) * -10000.0
        for layer in self.layers:
            h = layer(h, mask_add)
        pooled = torch.tanh(self.pooler(h[:, 0]))
        return h, pooled


def make_bert(opset):
    torch.manual_seed(SEED)
    m = BertEncoder()
    gen = torch.Generator().manual_seed(SEED + 3)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.LayerNorm):   # non-trivial affine parameters
                mod.weight.copy_(1.0 + 0.1 * torch.randn(HIDDEN, generator=gen))
                mod.bias.copy_(0.1 * torch.randn(HIDDEN, generator=gen))
    m.eval()
    input_ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen, dtype=torch.int64)
    attention_mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
    attention_mask[0, SEQ - 3:] = 0     # a little padding on the first sequence
    attention_mask[1, SEQ - 12:] = 0    # more on the second
    token_type_ids = torch.zeros(BATCH, SEQ, dtype=torch.int64)
    token_type_ids[:, SEQ // 2:] = 1
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask,
              "token_type_ids": token_type_ids}
    dyn = {"input_ids": {0: "batch"}, "attention_mask": {0: "batch"},
           "token_type_ids": {0: "batch"}, "last_hidden_state": {0: "batch"},
           "pooler_output": {0: "batch"}}
    return m, inputs, ["last_hidden_state", "pooler_output"], dyn


# name: (builder, opset, extra torch.onnx.export arguments)
MODELS = {
    "resnet50": (make_resnet50, 14, {}),
    "mobilenet_v2": (make_mobilenet_v2, 14, {}),
    "mobilenet_v2_bn": (make_mobilenet_v2, 14, {"training": torch.onnx.TrainingMode.PRESERVE}),
    "conv_decoder": (make_conv_decoder, 14, {}),
    "bert_encoder": (lambda: make_bert(14), 14, {}),
    "bert_encoder_op17": (lambda: make_bert(17), 17, {}),
}


# ----------------------------------------------------------------------------------------------

def export(name, out_root):
    make, opset, extra = MODELS[name]
    model, inputs, output_names, dyn = make()
    d = os.path.join(out_root, name)
    os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(d, "expected"), exist_ok=True)
    names = list(inputs.keys())
    args = tuple(inputs[n] for n in names)
    with torch.no_grad():
        outs = model(*args)
    if isinstance(outs, torch.Tensor):
        outs = (outs,)
    onnx_path = os.path.join(d, "model.onnx")
    tmp_path = onnx_path + ".tmp"
    with torch.no_grad():
        torch.onnx.export(model, args, tmp_path, opset_version=opset, do_constant_folding=True,
                          input_names=names, output_names=output_names,
                          dynamic_axes=dyn or {}, **extra)
    import onnx
    onnx.checker.check_model(onnx.load(tmp_path))
    manifest = {"name": name, "opset": opset, "inputs": [], "outputs": []}
    for n in names:
        f = "inputs/%s.npy" % sanitize(n)
        np.save(os.path.join(d, f), inputs[n].numpy())
        manifest["inputs"].append({"name": n, "file": f})
    for n, t in zip(output_names, outs):
        a = t.detach().numpy().astype(np.float32)
        if not np.all(np.isfinite(a)):
            raise RuntimeError("%s: PyTorch output %s is not finite" % (name, n))
        f = "expected/%s.npy" % sanitize(n)
        np.save(os.path.join(d, f), a)
        manifest["outputs"].append({"name": n, "file": f, "shape": list(a.shape),
                                    "max_abs": float(np.abs(a).max())})
    with open(os.path.join(d, "manifest.json"), "w") as fp:
        json.dump(manifest, fp, indent=1)
    os.replace(tmp_path, onnx_path)   # model.onnx last: its presence marks a complete export


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    out_root = argv[1]
    names = argv[2:] or list(MODELS)
    bad = [n for n in names if n not in MODELS]
    if bad:
        print("export_models.py: unknown model(s): %s (known: %s)"
              % (" ".join(bad), " ".join(MODELS)), file=sys.stderr)
        return 2
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    rc = 0
    for n in names:
        try:
            export(n, out_root)
            print("exported %s (torch %s, opset %d)" % (n, torch.__version__, MODELS[n][1]))
        except Exception as e:  # one failed export must not hide the others
            print("export_models.py: %s: export failed: %s: %s" % (n, type(e).__name__, e),
                  file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
