#!/usr/bin/env python3
"""Generates tests/data/gpt_tiny_golden.bin, the PyTorch reference for Loom's GPT.

A tiny GPT-2 (the llm.c architecture) is initialised with seeded random float32 parameters,
then everything is computed in float64:
  1. forward on one (tokens, targets) batch: logits and the mean cross-entropy loss,
  2. backward: the gradient of that loss for every parameter,
  3. 10 AdamW steps on the same batch (global grad-norm clipping, warmup + cosine LR),
     recording each step's loss and pre-clip grad norm.
Results are written as float32 (see golden_file.py for the format).

Usage: /usr/bin/python3 scripts/make_golden.py --out tests/data/gpt_tiny_golden.bin
"""

import argparse
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_file import read_golden, write_golden  # noqa: E402

# ---- configuration ------------------------------------------------------------------------

SEED = 1337
V = 97          # vocabulary size (Loom pads it to 128 internally; the golden stores [V, C])
T = 16          # sequence length (= rows of the position table)
L = 2           # layers
NH = 4          # heads
C = 48          # model width (head size 12)
B = 3           # batch

N_STEPS = 10
LR = 3e-3
MIN_LR = 3e-4
WARMUP_STEPS = 3
WEIGHT_DECAY = 0.1
BETA1, BETA2 = 0.9, 0.95
EPS = 1e-8
# The pre-clip grad norm runs from about 1.2 to 1.8 over the 10 steps: with 1.5, clipping is
# active in 5 steps and inactive in the other 5 (each at least 3% away from the threshold, so
# float32 engines take the same branch), which exercises both code paths.
GRAD_CLIP = 1.5


# ---- model --------------------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    # True: F.scaled_dot_product_attention (PyTorch >= 2.0; flash/memory-efficient kernels on a
    # GPU) instead of the explicit softmax below. Off for the golden files; benchmarks set it.
    use_sdpa = False

    def __init__(self, d_model, n_head):
        super().__init__()
        assert d_model % n_head == 0
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)   # columns: q | k | v
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, t, c = x.shape
        hs = c // self.n_head
        q, k, v = self.qkv(x).split(c, dim=-1)
        # [b, t, c] -> [b, nh, t, hs]; head h is the contiguous column slice h*hs .. h*hs+hs-1
        q = q.view(b, t, self.n_head, hs).transpose(1, 2)
        k = k.view(b, t, self.n_head, hs).transpose(1, 2)
        v = v.view(b, t, self.n_head, hs).transpose(1, 2)
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(b, t, c))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)   # heads concatenated in head order
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        # GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model, eps=1e-5)
        self.attn = CausalSelfAttention(d_model, n_head)
        self.ln2 = nn.LayerNorm(d_model, eps=1e-5)
        self.mlp = MLP(d_model)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """GPT-2 with learned positions and an LM head tied to the token embedding.

    Parameter names match Loom's: wte, wpe, h.{l}.ln1.weight, ..., ln_f.bias.
    wte has `padded_vocab` rows (>= vocab); logits over the padding rows are computed, as in
    Loom, but excluded from the loss. With padded_vocab == vocab there is no padding.
    """

    def __init__(self, vocab, seq_len, n_layer, n_head, d_model, padded_vocab=None):
        super().__init__()
        self.vocab = vocab
        self.padded_vocab = padded_vocab or vocab
        assert self.padded_vocab >= vocab
        self.wte = nn.Parameter(torch.empty(self.padded_vocab, d_model))
        self.wpe = nn.Parameter(torch.empty(seq_len, d_model))
        self.h = nn.ModuleList([Block(d_model, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model, eps=1e-5)

    def forward(self, tokens, targets=None):
        t = tokens.shape[1]
        x = self.wte[tokens] + self.wpe[:t]
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.t()          # tied head, no bias
        logits = logits[..., :self.vocab]             # drop the padded vocab columns
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, self.vocab), targets.reshape(-1).long())
        return logits, loss


def init_parameters(model, n_layer, generator):
    """Draws every parameter in float32, in named_parameters() order, from `generator`.

    Weights (embeddings, Linear) ~ N(0, 0.02), the residual projections (attn.proj.weight,
    mlp.proj.weight) ~ N(0, 0.02/sqrt(2L)); Linear biases ~ N(0, 0.02); LayerNorm weights
    ~ 1 + N(0, 0.1), LayerNorm biases ~ N(0, 0.1). Biases and LayerNorm parameters are not
    left at their usual 0/1 so that their gradients are really tested.
    """
    with torch.no_grad():
        for name, p in model.named_parameters():
            assert p.dtype == torch.float32
            noise = torch.empty_like(p)
            if ".ln" in name or name.startswith("ln_f."):
                noise.normal_(0.0, 0.1, generator=generator)
                p.copy_(1.0 + noise if name.endswith(".weight") else noise)
            elif name.endswith("proj.weight"):
                p.copy_(noise.normal_(0.0, 0.02 / math.sqrt(2 * n_layer), generator=generator))
            else:  # wte, wpe, qkv/fc weights, all Linear biases
                p.copy_(noise.normal_(0.0, 0.02, generator=generator))


# ---- optimisation -------------------------------------------------------------------------

def lr_at(step, lr, min_lr, warmup_steps, steps):
    """Learning rate of 0-based `step`: linear warmup, then cosine decay from lr to min_lr."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, steps - warmup_steps)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model):
    """AdamW with weight decay on the matrices (dim >= 2) only."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR, betas=(BETA1, BETA2), eps=EPS)


# ---- main ---------------------------------------------------------------------------------

def to_f32(t):
    return t.detach().cpu().to(torch.float32).numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/data/gpt_tiny_golden.bin")
    args = ap.parse_args()

    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)

    # Parameters drawn in float32; the float32 values are what the golden stores.
    model = GPT(V, T, L, NH, C)
    init_parameters(model, L, gen)
    params_f32 = [(name, p.detach().numpy().copy()) for name, p in model.named_parameters()]

    tokens = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64).to(torch.int32)
    targets = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64).to(torch.int32)

    # All computation in float64 (float32 -> float64 is exact).
    model = model.double()
    idx = tokens.long()

    # 1-2. forward + backward at the initial parameters
    logits, loss = model(idx, targets)
    loss.backward()
    logits0, loss0 = to_f32(logits), to_f32(loss).reshape(1)
    loss0_f64 = loss.item()
    grads0 = [(name, to_f32(p.grad)) for name, p in model.named_parameters()]

    # 3. training steps on the same batch
    opt = make_optimizer(model)
    losses, grad_norms, clipped = [], [], 0
    for step in range(N_STEPS):
        opt.zero_grad(set_to_none=True)
        _, loss = model(idx, targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)  # pre-clip norm
        lr = lr_at(step, LR, MIN_LR, WARMUP_STEPS, N_STEPS)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        losses.append(loss.item())
        grad_norms.append(norm.item())
        clipped += norm.item() > GRAD_CLIP
        print(f"step {step:2d}  lr {lr:.6f}  loss {loss.item():.6f}  grad_norm {norm.item():.6f}")
    assert abs(losses[0] - loss0_f64) < 1e-12, "step 0 must reproduce the initial loss"
    if clipped in (0, N_STEPS):
        sys.exit(f"grad clip {GRAD_CLIP} active in {clipped} of {N_STEPS} steps; want a mix")
    print(f"grad_clip {GRAD_CLIP}: clipping active in {clipped} of {N_STEPS} steps")

    entries = [
        ("config", np.array([V, T, L, NH, C, B, N_STEPS], dtype=np.int32)),
        ("optim", np.array([LR, MIN_LR, WARMUP_STEPS, N_STEPS, WEIGHT_DECAY, BETA1, BETA2, EPS,
                            GRAD_CLIP], dtype=np.float32)),
        ("tokens", tokens.numpy()),
        ("targets", targets.numpy()),
    ]
    entries += [(f"param/{name}", a) for name, a in params_f32]
    entries += [("logits", logits0), ("loss", loss0)]
    entries += [(f"grad/{name}", g) for name, g in grads0]
    entries += [("losses", np.array(losses, dtype=np.float32)),
                ("grad_norms", np.array(grad_norms, dtype=np.float32))]

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_golden(args.out, entries)

    # Verify: read back and compare every entry bit for bit.
    back = read_golden(args.out)
    assert list(back.keys()) == [n for n, _ in entries]
    for name, a in entries:
        a = np.asarray(a)
        assert back[name].shape == a.shape, name
        assert np.array_equal(back[name], a.astype(back[name].dtype)), name
    print(f"wrote {args.out}: {len(entries)} entries, {os.path.getsize(args.out)} bytes (verified)")


if __name__ == "__main__":
    main()
