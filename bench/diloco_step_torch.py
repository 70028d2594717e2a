#!/usr/bin/env python3
"""The inner step of `headroom diloco` in PyTorch (Debian's python3-torch), for
bench/diloco_compare.sh: the same tiny byte transformer as src/lm/lm.cc (2 pre-LN blocks, 128
wide, 4 heads, causal attention, 4x GELU MLP, learned positions), the same AdamW and clipping,
one thread. Prints tokens per second.

Usage: diloco_step_torch.py BATCH SEQ_LEN SECONDS
"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(self.ln1(x)).chunk(3, -1)
        q = q.view(b, t, self.heads, hd).transpose(1, 2)
        k = k.view(b, t, self.heads, hd).transpose(1, 2)
        v = v.view(b, t, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        h = x + self.proj(y)
        return h + self.out(F.gelu(self.fc(self.ln2(h))))


class Model(nn.Module):
    def __init__(self, d=128, layers=2, heads=4, positions=256):
        super().__init__()
        self.tok = nn.Embedding(256, d)
        self.pos = nn.Embedding(positions, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, 256)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t)).unsqueeze(0)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))


def main():
    batch, seq, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    torch.set_num_threads(1)
    torch.manual_seed(1)
    model = Model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1)
    g = torch.Generator().manual_seed(1)

    def step():
        data = torch.randint(0, 256, (batch, seq + 1), generator=g)
        opt.zero_grad()
        logits = model(data[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 256), data[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for _ in range(3):
        step()
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step()
        n += 1
    print(f"{n * batch * seq / (time.perf_counter() - t0):.1f}")


if __name__ == "__main__":
    main()
