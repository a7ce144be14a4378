#!/usr/bin/python3
"""Writes the built-in GPT's architecture as a TorchScript module for model.kind = "torchscript":
pre-LN blocks, fused qkv attention, tanh GELU MLP, tied head, LayerNorm eps 1e-5, with the same
parameter names, shapes and order as the Eigen GPT's layout ("wte", "wpe", "h.0.ln1.w", ...), so
fragments, checkpoints and `diloco inspect` treat both alike. forward(inputs, targets) takes
(B, T) int64 token ids and returns the mean cross-entropy.

  scripts/export_gpt.py --out gpt.pt [--vocab 256 --seq_len 64 --n_layer 4 --n_head 4 --n_embd 128 --seed 1]

Runs with Debian's python3-torch (/usr/bin/python3)."""
import argparse
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Norm(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.w = nn.Parameter(torch.ones(c))
        self.b = nn.Parameter(torch.zeros(c))

    def forward(self, x):
        return F.layer_norm(x, (self.w.shape[0],), self.w, self.b, 1e-5)


class Dense(nn.Module):
    def __init__(self, n_in: int, n_out: int, std: float):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n_out, n_in) * std)
        self.b = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return F.linear(x, self.w, self.b)


class Attention(nn.Module):
    def __init__(self, c: int, n_head: int, t: int, std: float, std_resid: float):
        super().__init__()
        self.qkv = Dense(c, 3 * c, std)
        self.proj = Dense(c, c, std_resid)
        self.n_head = n_head
        self.register_buffer("mask", torch.tril(torch.ones(t, t, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))


class Mlp(nn.Module):
    def __init__(self, c: int, std: float, std_resid: float):
        super().__init__()
        self.fc = Dense(c, 4 * c, std)
        self.proj = Dense(4 * c, c, std_resid)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c: int, n_head: int, t: int, std: float, std_resid: float):
        super().__init__()
        self.ln1 = Norm(c)
        self.attn = Attention(c, n_head, t, std, std_resid)
        self.ln2 = Norm(c)
        self.mlp = Mlp(c, std, std_resid)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    def __init__(self, vocab: int, t: int, n_layer: int, n_head: int, c: int, std: float):
        super().__init__()
        std_resid = std / math.sqrt(2.0 * n_layer)
        self.wte = nn.Parameter(torch.randn(vocab, c) * std)
        self.wpe = nn.Parameter(torch.randn(t, c) * std)
        self.h = nn.ModuleList([Block(c, n_head, t, std, std_resid) for _ in range(n_layer)])
        self.lnf = Norm(c)

    def forward(self, inputs, targets):
        T = inputs.shape[1]
        x = F.embedding(inputs, self.wte) + self.wpe[:T]
        for block in self.h:
            x = block(x)
        logits = self.lnf(x) @ self.wte.t()  # tied head
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--seq_len", type=int, default=64)
    ap.add_argument("--n_layer", type=int, default=4)
    ap.add_argument("--n_head", type=int, default=4)
    ap.add_argument("--n_embd", type=int, default=128)
    ap.add_argument("--init_std", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.n_embd % a.n_head:
        print(f"--n_embd {a.n_embd} must be divisible by --n_head {a.n_head}", file=sys.stderr)
        return 2
    torch.manual_seed(a.seed)
    m = Gpt(a.vocab, a.seq_len, a.n_layer, a.n_head, a.n_embd, a.init_std)
    torch.jit.script(m).save(a.out)
    n = sum(p.numel() for p in m.parameters())
    print(f"wrote {a.out}: gpt L={a.n_layer} C={a.n_embd} heads={a.n_head} T={a.seq_len} V={a.vocab}, {n} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
