#!/usr/bin/python3
"""The PPO update of headroom (rl_train/ppo.cc) written the usual way in PyTorch (CleanRL-style).

float32, as headroom's update. Same network (22 -> 64 -> 64 tanh; actor 15 logits in heads of
5, 5 and 5, critic 1 output),
orthogonal init, same batch (4096), minibatch (512), epochs (10), Adam (lr 3e-4, eps 1e-5),
clip 0.2, entropy 0.01, value 0.5, gradient-norm clip 0.5, advantages normalised per minibatch.
Prints updates (full batch x epochs) per second. Usage: ppo_update_torch.py [REPEATS]
"""
import sys
import time

import numpy as np
import torch
import torch.nn as nn

torch.set_num_threads(1)
torch.manual_seed(1)
OBS, HEADS, HIDDEN = 22, (5, 5, 5), 64
BATCH, MINIBATCH, EPOCHS = 4096, 512, 10


def layer(i, o, gain):
    l = nn.Linear(i, o)
    nn.init.orthogonal_(l.weight, gain)
    nn.init.zeros_(l.bias)
    return l


actor = nn.Sequential(layer(OBS, HIDDEN, 2 ** 0.5), nn.Tanh(), layer(HIDDEN, HIDDEN, 2 ** 0.5),
                      nn.Tanh(), layer(HIDDEN, sum(HEADS), 0.01))
critic = nn.Sequential(layer(OBS, HIDDEN, 2 ** 0.5), nn.Tanh(), layer(HIDDEN, HIDDEN, 2 ** 0.5),
                       nn.Tanh(), layer(HIDDEN, 1, 1.0))
params = list(actor.parameters()) + list(critic.parameters())
opt = torch.optim.Adam(params, lr=3e-4, eps=1e-5)

rng = np.random.default_rng(1)
obs = torch.tensor(rng.normal(size=(BATCH, OBS)), dtype=torch.float32)
acts = torch.tensor(np.stack([rng.integers(0, h, BATCH) for h in HEADS], 1))
with torch.no_grad():
    logits = actor(obs)
    logp_old = sum(torch.distributions.Categorical(logits=l).log_prob(acts[:, i])
                   for i, l in enumerate(torch.split(logits, HEADS, 1)))
adv_all = torch.tensor(rng.normal(size=BATCH), dtype=torch.float32)
ret_all = torch.tensor(rng.normal(size=BATCH), dtype=torch.float32)


def update():
    for _ in range(EPOCHS):
        perm = torch.randperm(BATCH)
        for s in range(0, BATCH, MINIBATCH):
            idx = perm[s:s + MINIBATCH]
            lg = actor(obs[idx])
            logp, ent = 0.0, 0.0
            for i, l in enumerate(torch.split(lg, HEADS, 1)):
                d = torch.distributions.Categorical(logits=l)
                logp = logp + d.log_prob(acts[idx, i])
                ent = ent + d.entropy()
            ratio = (logp - logp_old[idx]).exp()
            a = adv_all[idx]
            a = (a - a.mean()) / (a.std() + 1e-8)
            pg = torch.max(-a * ratio, -a * ratio.clamp(0.8, 1.2)).mean()
            v = critic(obs[idx]).squeeze(1)
            vl = 0.5 * ((v - ret_all[idx]) ** 2).mean()
            loss = pg + 0.5 * vl - 0.01 * ent.mean()
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(params, 0.5)
            opt.step()


repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
update()  # warm-up
t0 = time.perf_counter()
for _ in range(repeats):
    update()
print(f"{repeats / (time.perf_counter() - t0):.4f} updates/s")
