#!/usr/bin/python3
"""Writes the TorchScript modules test_torch reads into DIR: the built-in GPT's architecture at a
tiny size (scripts/export_gpt.py), and three modules that must be refused: one whose forward takes
one argument, one whose forward returns per-token losses instead of their mean, one whose forward
returns a tuple."""
import os
import subprocess
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class OneArgument(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(4, 4))

    def forward(self, inputs):
        return self.w.sum() + inputs.float().sum()


class PerToken(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Parameter(torch.randn(256, 8) * 0.02)

    def forward(self, inputs, targets):
        logits = F.embedding(inputs, self.wte) @ self.wte.t()
        return F.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1), reduction="none")


class TupleReturn(PerToken):
    def forward(self, inputs, targets):
        logits = F.embedding(inputs, self.wte) @ self.wte.t()
        loss = F.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))
        return loss, logits


def main() -> int:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    export = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "export_gpt.py")
    subprocess.run([sys.executable, export, "--out", os.path.join(out, "gpt_tiny.pt"), "--vocab", "256", "--seq_len",
                    "16", "--n_layer", "2", "--n_head", "2", "--n_embd", "32"], check=True)
    torch.jit.script(OneArgument()).save(os.path.join(out, "one_argument.pt"))
    torch.jit.script(PerToken()).save(os.path.join(out, "per_token.pt"))
    torch.jit.script(TupleReturn()).save(os.path.join(out, "tuple_return.pt"))
    with open(os.path.join(out, "not_a_module.pt"), "w") as f:
        f.write("not a TorchScript archive\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
