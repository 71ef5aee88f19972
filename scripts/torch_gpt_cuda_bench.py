#!/usr/bin/env python3
"""GPU training-throughput yardstick for Loom's bench_gpt_training: the same GPT in PyTorch.

The model is make_golden.py's (GPT-2 / llm.c architecture: learned positions, pre-LayerNorm
blocks, GELU tanh, LM head tied to wte, wte padded to a multiple of 128 rows), its attention
through F.scaled_dot_product_attention (causal; flash attention on a GPU in bf16). The step runs
LossOnly below instead of the model's own forward: the head multiplies by wte's real rows only
(the logits of the V real tokens, as Loom's loss uses, with no slice of padded logits to copy)
and only the loss leaves the module, so that torch.compile need not keep the logits: PyTorch's
best form of the same computation. One step: forward and loss under autocast (bf16 or
fp16; none for fp32), backward, clip_grad_norm_(1.0), AdamW (fused where the device supports
it). --compile wraps the model in torch.compile (the step's compile happens in the warm-up).
fp32 runs with TF32 off, as Loom's fp32 matmuls (CUBLAS_COMPUTE_32F).

Tokens are random, made on the device before the timed steps. Each step is timed between two
synchronisations; the report is the median step, as bench_gpt_training's:
    torch tokens_per_s=<median> tokens_per_s_max=<best step> step_ms=<median> mfu=<median or -1>
          max_allocated_mb=<> max_reserved_mb=<> precision=<> compile=<0|1> params=<count>
(one line), plus device_used_mb: the device's memory in use after the steps (total - free, the
CUDA context and caching allocator included), the figure comparable with Loom's device_mem_mb.
mfu counts 6 N + 12 L C T FLOPs per token (N = 12 L C^2 + V C, Loom's
GptShape::flops_per_token) against --peak_tflops, so that both programs divide by the same peak;
-1 without it. Runs on the CPU too (--device cpu, tiny shapes: the suite's smoke test), where
PyTorch < 2.0 lacks SDPA and torch.compile and the explicit attention is used.
"""

import argparse
import contextlib
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import GPT, CausalSelfAttention, init_parameters  # noqa: E402


def padded(v, multiple=128):
    return (v + multiple - 1) // multiple * multiple


class LossOnly(torch.nn.Module):
    """make_golden's GPT forward up to the loss, the tied head over wte's real rows only."""

    def __init__(self, gpt):
        super().__init__()
        self.gpt = gpt

    def forward(self, tokens, targets):
        g = self.gpt
        x = g.wte[tokens] + g.wpe[:tokens.shape[1]]
        for block in g.h:
            x = block(x)
        logits = g.ln_f(x) @ g.wte[:g.vocab].t()
        return F.cross_entropy(logits.reshape(-1, g.vocab), targets.reshape(-1).long())


def main():
    ap = argparse.ArgumentParser(description="PyTorch GPT training throughput on one device")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="bf16")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--d_model", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--peak_tflops", type=float, default=0.0,
                    help="the device's peak for the compute dtype (Loom's bench prints it)")
    ap.add_argument("--seed", type=int, default=1337)
    args = ap.parse_args()

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        print(f"device: {torch.cuda.get_device_name(dev)}, PyTorch {torch.__version__}")
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    CausalSelfAttention.use_sdpa = hasattr(F, "scaled_dot_product_attention")
    if args.compile and not hasattr(torch, "compile"):
        sys.exit(f"torch_gpt_cuda_bench: --compile needs PyTorch >= 2.0 (this is {torch.__version__})")

    model = GPT(args.vocab, args.seq, args.layers, args.heads, args.d_model, padded_vocab=padded(args.vocab))
    init_parameters(model, args.layers, gen)
    model.to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    step_model = torch.compile(LossOnly(model)) if args.compile else LossOnly(model)

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    fused = cuda and "fused" in torch.optim.AdamW.__init__.__code__.co_varnames
    opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8,
                            **({"fused": True} if fused else {"foreach": True}))
    scaler = torch.cuda.amp.GradScaler() if (cuda and args.precision == "fp16") else None

    def compute_dtype():
        if args.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if args.precision == "bf16" else torch.float16
        return torch.autocast(dev.type, dtype=dtype)

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    def train_step(tokens, targets):
        opt.zero_grad(set_to_none=True)
        with compute_dtype():
            loss = step_model(tokens, targets)
        if scaler:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
        else:
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        return loss

    shape = (args.batch, args.seq)
    batches = [(torch.randint(0, args.vocab, shape, generator=gen).to(dev),
                torch.randint(0, args.vocab, shape, generator=gen).to(dev))
               for _ in range(args.warmup + args.steps)]
    step_s = []
    loss = None
    for i, (tokens, targets) in enumerate(batches):
        sync()
        t0 = time.perf_counter()
        loss = train_step(tokens, targets)
        sync()
        dt = time.perf_counter() - t0
        if i >= args.warmup:
            step_s.append(dt)
            print(f"step {i + 1 - args.warmup:3d}  loss {loss.item():.4f}  {1e3 * dt:8.2f} ms  "
                  f"{args.batch * args.seq / dt:10.0f} tokens/s")

    tokens_per_step = args.batch * args.seq
    med = statistics.median(step_s)
    tps = tokens_per_step / med
    C, L = args.d_model, args.layers
    flops_per_token = 6.0 * (12 * L * C * C + args.vocab * C) + 12.0 * L * C * args.seq
    mfu = tps * flops_per_token / (args.peak_tflops * 1e12) if args.peak_tflops > 0 else -1
    alloc = torch.cuda.max_memory_allocated(dev) / 2**20 if cuda else -1
    reserved = torch.cuda.max_memory_reserved(dev) / 2**20 if cuda else -1
    used = -1.0
    if cuda:
        free, total = torch.cuda.mem_get_info(dev)
        used = (total - free) / 2**20
    print(f"torch tokens_per_s={tps:.1f} tokens_per_s_max={tokens_per_step / min(step_s):.1f} "
          f"step_ms={1e3 * med:.3f} mfu={mfu:.4f} max_allocated_mb={alloc:.1f} max_reserved_mb={reserved:.1f} "
          f"device_used_mb={used:.1f} "
          f"precision={args.precision} compile={int(args.compile)} params={n_params}")


if __name__ == "__main__":
    main()
