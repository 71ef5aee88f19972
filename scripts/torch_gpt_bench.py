#!/usr/bin/env python3
"""CPU training-throughput reference for Loom: the same GPT in PyTorch, fp32 or bf16 autocast.

The model is the one in make_golden.py (GPT-2 / llm.c architecture: learned positions,
pre-LayerNorm blocks, GELU tanh, explicit-matmul causal attention, LM head tied to wte).
As in Loom, the vocabulary is padded to a multiple of 128: wte has Vp rows and logits are
computed over Vp columns, but the padded columns are sliced off before the cross-entropy.
Training uses AdamW (foreach, not fused) on random token batches; `warmup` steps run untimed,
then `steps` steps are timed.

--precision bf16 is PyTorch's ordinary mixed precision on the CPU: forward and loss run under
torch.autocast('cpu', dtype=torch.bfloat16) (matmuls and linears in bf16 through oneDNN, the ops
on autocast's fp32 list, cross-entropy among them, in fp32; the residual stream and so the
LayerNorms stay fp32, since bf16 + fp32 promotes to fp32); the parameters, their gradients and
AdamW's state stay fp32 (the master weights), and backward, clipping and the update run outside
autocast. bf16 needs no loss scaling.

Prints one final line:
    torch tokens_per_s=<float> step_ms=<float> threads=<n> params=<count> precision=<fp32|bf16>
          peak_rss_mb=<float>
(on one line) where params counts every parameter element, padded wte rows included, and
peak_rss_mb is the process's peak resident set (getrusage ru_maxrss, KiB on Linux, / 1024: the
same MiB as Loom's "peak RSS", read from VmHWM).
"""

import argparse
import contextlib
import os
import resource
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import GPT, init_parameters  # noqa: E402


def padded(v, multiple=128):
    return (v + multiple - 1) // multiple * multiple


def main():
    ap = argparse.ArgumentParser(description="PyTorch CPU GPT training throughput")
    ap.add_argument("--n_layer", type=int, default=6)
    ap.add_argument("--n_head", type=int, default=6)
    ap.add_argument("--d_model", type=int, default=384)
    ap.add_argument("--seq_len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="fp32, or bf16 autocast around forward and loss (fp32 master weights)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    model = GPT(args.vocab, args.seq_len, args.n_layer, args.n_head, args.d_model,
                padded_vocab=padded(args.vocab))
    init_parameters(model, args.n_layer, gen)
    n_params = sum(p.numel() for p in model.parameters())

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, foreach=True)

    def batch():
        shape = (args.batch, args.seq_len)
        return (torch.randint(0, args.vocab, shape, generator=gen),
                torch.randint(0, args.vocab, shape, generator=gen))

    def compute_dtype():
        if args.precision == "bf16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def train_step(tokens, targets):
        opt.zero_grad(set_to_none=True)
        with compute_dtype():
            _, loss = model(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        train_step(*batch())

    # Batches are generated outside the timed region.
    batches = [batch() for _ in range(args.steps)]
    t0 = time.perf_counter()
    for tokens, targets in batches:
        train_step(tokens, targets)
    elapsed = time.perf_counter() - t0

    step_ms = 1000.0 * elapsed / args.steps
    tokens_per_s = args.batch * args.seq_len * args.steps / elapsed
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"torch tokens_per_s={tokens_per_s:.1f} step_ms={step_ms:.1f} "
          f"threads={args.threads} params={n_params} precision={args.precision} "
          f"peak_rss_mb={peak_rss_mb:.1f}")


if __name__ == "__main__":
    main()
