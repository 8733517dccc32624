#!/usr/bin/python3
"""Export the benchmark models to ONNX with random weights (nothing is downloaded).

Run with /usr/bin/python3: Debian's torch 1.13, torchvision and onnx (python3-torch,
python3-torchvision, python3-onnx). onnxruntime is not needed here (bench/ort_bench.py uses it).

usage: /usr/bin/python3 bench/export_models.py [--out DIR] [--force] [--opset N] [MODEL ...]

Models (default: all), written to DIR/<model>.onnx (DIR defaults to bench/models/):
  resnet50     torchvision resnet50, eval, input "input" float32 [1,3,224,224], opset 13
  mobilenetv2  torchvision mobilenet_v2, eval, input "input" float32 [1,3,224,224], opset 13
  dcgan        the DCGAN generator of the PyTorch examples (Radford et al.): a 100-long latent
               [1,100,1,1] through five ConvTranspose2d 4x4 (stride 1 then 2, 512-256-128-64
               channels, BatchNorm and ReLU after each but the last, Tanh) to [1,3,64,64],
               opset 13. Not among bench/models.sh's default models (pass --models dcgan)
  lstm         a two-layer nn.LSTM of 256 (a speech or text encoder's shape): input "input"
               float32 [64,8,256] (64 steps of 8 sequences), output "output" [64,8,256],
               opset 14. Not among the default models (pass --models lstm)
  bert_base    BERT-base encoder in plain nn.Modules: vocab 30522, 12 layers, d 768, 12 heads,
               FFN 3072 with exact (erf) GELU, post-LayerNorm, token + position embeddings and
               an embedding LayerNorm, opset 14. Inputs: input_ids int64 [1,128] and
               attention_mask int64 [1,128] (1 = attend, 0 = padding, the Hugging Face
               convention); the graph turns the mask into an additive one, (1 - mask) * -10000,
               broadcast over heads and query positions. Output last_hidden_state [1,128,768].
  gpt2_small   GPT-2-small-style decoder: 12 layers, d 768, 12 heads, pre-LayerNorm, tanh GELU,
               learned positions, final LayerNorm, LM head tied to the token embedding (one
               initializer, read by both the Gather and the Gemm), causal mask built in the graph
               from position indices (j <= i), T = 128, vocab 50257, opset 14.
               Input input_ids int64 [1,128]; output logits [1,128,50257].

--opset N exports every model at opset N instead (13..17; at 17 torch 1.13 writes
LayerNormalization nodes, below it decomposes LayerNorm into ReduceMean/Sub/Pow/Sqrt/Div).
All shapes are static (batch 1; lstm: 8 sequences). Weights come from torch.manual_seed(0)
(LayerNorm affine parameters are randomized too, so they are not the trivial 1/0; the CNNs'
BatchNorm statistics are those of one random batch, so activations keep a realistic scale).
Files that exist are skipped unless --force; each file is written under a temporary name and renamed when complete, then
checked with onnx.checker.
"""
import argparse
import math
import os
import sys
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.filterwarnings("ignore")

HERE = os.path.dirname(os.path.abspath(__file__))
SEQ = 128


# ----------------------------------------------------------------------------------------------
# CNNs (torchvision)

def calibrate_batchnorm(model):
    """Sets every BatchNorm's running statistics to those of one random batch. With torchvision's
    initial statistics (mean 0, var 1) MobileNetV2's activations shrink about 10x per stage (the
    output is ~1e-9); calibrated, every layer sees values of a realistic scale."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None   # cumulative average: after one batch, that batch's statistics
    model.train()
    with torch.no_grad():
        model(torch.randn(4, 3, 224, 224))
    return model


def make_resnet50():
    import torchvision
    return calibrate_batchnorm(torchvision.models.resnet50(weights=None)), \
        {"input": torch.randn(1, 3, 224, 224)}, ["output"]


def make_mobilenetv2():
    import torchvision
    return calibrate_batchnorm(torchvision.models.mobilenet_v2(weights=None)), \
        {"input": torch.randn(1, 3, 224, 224)}, ["output"]


def make_dcgan():
    ngf = 64
    layers, c_in = [], 100
    for i, c in enumerate([ngf * 8, ngf * 4, ngf * 2, ngf]):
        layers += [nn.ConvTranspose2d(c_in, c, 4, 1 if i == 0 else 2, 0 if i == 0 else 1,
                                      bias=False), nn.BatchNorm2d(c), nn.ReLU(True)]
        c_in = c
    m = nn.Sequential(*layers, nn.ConvTranspose2d(c_in, 3, 4, 2, 1, bias=False), nn.Tanh())
    for mod in m.modules():   # the calibration of calibrate_batchnorm, on latent vectors
        if isinstance(mod, nn.BatchNorm2d):
            mod.reset_running_stats()
            mod.momentum = None
    m.train()
    with torch.no_grad():
        m(torch.randn(16, 100, 1, 1))
    return m, {"input": torch.randn(1, 100, 1, 1)}, ["output"]


class LstmEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(256, 256, num_layers=2)

    def forward(self, x):
        return self.rnn(x)[0]


def make_lstm():
    return LstmEncoder(), {"input": torch.randn(64, 8, 256)}, ["output"]


# ----------------------------------------------------------------------------------------------
# Transformers in plain torch.nn

def split_heads(x, heads):
    # (B, T, H*D) -> (B, H, T, D)
    b, t, c = x.shape
    return x.view(b, t, heads, c // heads).permute(0, 2, 1, 3)


def merge_heads(x):
    # (B, H, T, D) -> (B, T, H*D)
    b, h, t, d = x.shape
    return x.permute(0, 2, 1, 3).reshape(b, t, h * d)


class BertLayer(nn.Module):
    def __init__(self, d, heads, ffn, eps):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.attn_out = nn.Linear(d, d)
        self.attn_norm = nn.LayerNorm(d, eps=eps)
        self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.ffn_norm = nn.LayerNorm(d, eps=eps)

    def forward(self, h, mask_add):
        q = split_heads(self.query(h), self.heads)
        k = split_heads(self.key(h), self.heads)
        v = split_heads(self.value(h), self.heads)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + mask_add
        ctx = merge_heads(torch.matmul(torch.softmax(scores, dim=-1), v))
        h = self.attn_norm(self.attn_out(ctx) + h)
        return self.ffn_norm(self.fc2(F.gelu(self.fc1(h))) + h)   # exact erf GELU


class BertBase(nn.Module):
    def __init__(self, vocab=30522, d=768, layers=12, heads=12, ffn=3072, max_pos=512, eps=1e-12):
        super().__init__()
        self.word = nn.Embedding(vocab, d)
        self.position = nn.Embedding(max_pos, d)
        self.emb_norm = nn.LayerNorm(d, eps=eps)
        self.layers = nn.ModuleList([BertLayer(d, heads, ffn, eps) for _ in range(layers)])

    def forward(self, input_ids, attention_mask):
        pos = torch.arange(input_ids.shape[1]).unsqueeze(0)
        h = self.emb_norm(self.word(input_ids) + self.position(pos))
        mask_add = (1.0 - attention_mask[:, None, None, :].to(h.dtype)) * -10000.0
        for layer in self.layers:
            h = layer(h, mask_add)
        return h


class Gpt2Block(nn.Module):
    def __init__(self, d, heads, eps):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d, eps=eps)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=eps)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_proj = nn.Linear(4 * d, d)

    def forward(self, h, causal):
        q, k, v = self.qkv(self.ln1(h)).split(h.shape[-1], dim=-1)
        q, k, v = (split_heads(t, self.heads) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        scores = torch.where(causal, scores, torch.tensor(torch.finfo(scores.dtype).min))
        h = h + self.proj(merge_heads(torch.matmul(torch.softmax(scores, dim=-1), v)))
        return h + self.fc_proj(F.gelu(self.fc(self.ln2(h)), approximate="tanh"))


class Gpt2Small(nn.Module):
    def __init__(self, vocab=50257, d=768, layers=12, heads=12, max_pos=1024, eps=1e-5):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(max_pos, d)
        self.blocks = nn.ModuleList([Gpt2Block(d, heads, eps) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d, eps=eps)
        # Gemm's C operand: F.linear with a bias on a 2-D input exports as one Gemm(transB=1)
        # reading wte.weight itself, so the tied weight is stored once (MatMul would need a
        # transposed copy, and constant folding would write all 154 MB of it a second time).
        self.register_buffer("head_bias", torch.zeros(vocab), persistent=False)

    def forward(self, input_ids):
        b, t = input_ids.shape
        pos = torch.arange(t)
        causal = (pos[None, :] <= pos[:, None]).view(1, 1, t, t)   # key j visible from query i
        h = self.wte(input_ids) + self.wpe(pos.unsqueeze(0))
        for block in self.blocks:
            h = block(h, causal)
        h = self.ln_f(h)
        logits = F.linear(h.reshape(b * t, -1), self.wte.weight, self.head_bias)
        return logits.view(b, t, -1)


def randomize_layernorms(model):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1.0 + 0.1 * torch.randn_like(m.weight))
                m.bias.copy_(0.1 * torch.randn_like(m.bias))


def make_bert_base():
    m = BertBase()
    randomize_layernorms(m)
    ids = torch.randint(0, 30522, (1, SEQ), dtype=torch.int64)
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    return m, {"input_ids": ids, "attention_mask": mask}, ["last_hidden_state"]


def make_gpt2_small():
    m = Gpt2Small()
    with torch.no_grad():   # GPT-2's init scale: N(0, 0.02) keeps 12 residual blocks tame
        for p in m.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
    randomize_layernorms(m)
    ids = torch.randint(0, 50257, (1, SEQ), dtype=torch.int64)
    return m, {"input_ids": ids}, ["logits"]


# name: (builder, opset)
MODELS = {
    "resnet50": (make_resnet50, 13),
    "mobilenetv2": (make_mobilenetv2, 13),
    "dcgan": (make_dcgan, 13),
    "lstm": (make_lstm, 14),
    "bert_base": (make_bert_base, 14),
    "gpt2_small": (make_gpt2_small, 14),
}


def export(name, out_dir, opset=None):
    make, default_opset = MODELS[name]
    opset = opset or default_opset
    torch.manual_seed(0)
    model, inputs, output_names = make()
    model.eval()
    path = os.path.join(out_dir, name + ".onnx")
    tmp = path + ".tmp"
    names = list(inputs)
    with torch.no_grad():
        torch.onnx.export(model, tuple(inputs[n] for n in names), tmp, opset_version=opset,
                          do_constant_folding=True, input_names=names, output_names=output_names)
    import onnx
    onnx.checker.check_model(tmp)   # by path: works past the 2 GB protobuf limit too
    os.replace(tmp, path)
    return opset


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "models"), help="output directory")
    ap.add_argument("--force", action="store_true", help="re-export files that exist")
    ap.add_argument("--opset", type=int, help="opset for every model (13..17; default: per model)")
    ap.add_argument("models", nargs="*", help="models (default: all): " + " ".join(MODELS))
    args = ap.parse_args()
    names = args.models or list(MODELS)
    bad = [n for n in names if n not in MODELS]
    if bad:
        print("export_models.py: unknown model(s): %s (known: %s)" % (" ".join(bad), " ".join(MODELS)),
              file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    rc = 0
    for n in names:
        path = os.path.join(args.out, n + ".onnx")
        if os.path.exists(path) and not args.force:
            print("%s: exists, skipped (--force to re-export)" % path)
            continue
        t0 = time.time()
        try:
            opset = export(n, args.out, args.opset)
            print("%s: exported (torch %s, opset %d, %.0f MB, %.1f s)"
                  % (path, torch.__version__, opset, os.path.getsize(path) / 1e6,
                     time.time() - t0))
        except Exception as e:  # one failed export must not hide the others
            print("export_models.py: %s: export failed: %s: %s" % (n, type(e).__name__, e),
                  file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
