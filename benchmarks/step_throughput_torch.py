#!/usr/bin/python3
"""PyTorch twin of step_throughput.cpp: the same byte GPT (pre-LN, fused qkv, GELU-tanh MLP,
tied head), sizes, batch and step count, trained with AdamW on one thread in float32.
Prints one JSON line with tokens_per_s (or an "error" key when torch is missing).

With --serve it stays up for step_throughput to time it in slices beside the chip's: after the
warm-up it prints "ready", then for each line N read from stdin it trains N steps and prints the
seconds they took; it ends at end of input."""
import argparse
import json
import math
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--n_embd", type=int, default=128)
    ap.add_argument("--n_layer", type=int, default=4)
    ap.add_argument("--n_head", type=int, default=4)
    ap.add_argument("--seq_len", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--serve", action="store_true", help="time slices of N steps read from stdin")
    a = ap.parse_args()

    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except Exception as e:  # torch missing or broken: report, don't fail
        print(json.dumps({"tokens_per_s": None, "error": f"torch unavailable: {e}"}))
        return 0

    torch.set_num_threads(1)
    torch.manual_seed(0)
    C, L, NH, T, V, B = a.n_embd, a.n_layer, a.n_head, a.seq_len, a.vocab, a.batch

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(C)
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)
            self.ln2 = nn.LayerNorm(C)
            self.fc = nn.Linear(C, 4 * C)
            self.fc_proj = nn.Linear(4 * C, C)
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

        def forward(self, x):  # (B,T,C)
            Bx, Tx, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q = q.view(Bx, Tx, NH, C // NH).transpose(1, 2)  # (B,NH,T,hs)
            k = k.view(Bx, Tx, NH, C // NH).transpose(1, 2)
            v = v.view(Bx, Tx, NH, C // NH).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // NH))  # (B,NH,T,T)
            att = att.masked_fill(~self.mask[:Tx, :Tx], float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(Bx, Tx, C)
            x = x + self.proj(y)
            x = x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
            return x

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.lnf = nn.LayerNorm(C)
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, 0.0, 0.02)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            logits = self.lnf(x) @ self.wte.weight.t()  # tied head (B,T,V)
            return F.cross_entropy(logits.view(-1, V), targets.reshape(-1))

    model = GPT()
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    tokens = torch.randint(0, V, (B, T + 1))
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    if a.serve:
        print("ready", flush=True)
        for line in sys.stdin:
            n = int(line)
            t0 = time.perf_counter()
            for _ in range(n):
                step()
            print(repr(time.perf_counter() - t0), flush=True)
        return 0
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    elapsed = time.perf_counter() - t0
    print(json.dumps({
        "tokens_per_s": B * T * a.steps / elapsed,
        "ms_per_step": 1e3 * elapsed / a.steps,
        "final_loss": float(loss),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "config": {"n_embd": C, "n_layer": L, "n_head": NH, "seq_len": T, "batch": B,
                   "steps": a.steps},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
