#!/usr/bin/env python3
"""The yardstick for tests/bench/bench_cuda_ops: the same ops on the same shapes in PyTorch on
the same GPU (fp32, and the attention also through scaled_dot_product_attention's flash and
cuDNN backends in bf16, the issue's target). Prints the same columns.

    python3 scripts/torch_ops_bench.py
"""
import torch
import torch.nn.functional as F


def time_ms(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def row(op, shape, ms, nbytes=0, flops=0):
    s = f"{op:<28} {shape:<28} {ms:9.3f} ms"
    if nbytes:
        s += f" {nbytes / ms / 1e6:9.1f} GB/s"
    if flops:
        s += f" {flops / ms / 1e9:9.2f} TFLOP/s"
    print(s)


def main():
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 like Loom's backend
    dev = "cuda"
    print("device:", torch.cuda.get_device_name())
    B, T, C, NH, Vp = 8, 1024, 768, 12, 50304
    N = B * T
    x = torch.randn(N, C, device=dev)
    w, b = torch.randn(C, device=dev), torch.randn(C, device=dev)
    row("layernorm_forward", "N 8192 x C 768", time_ms(lambda: F.layer_norm(x, (C,), w, b)), 2 * N * C * 4)
    big = torch.randn(N, 4 * C, device=dev)
    row("gelu_forward", "N 8192 x 4C", time_ms(lambda: F.gelu(big, approximate="tanh")), 2 * N * 4 * C * 4)
    W = torch.randn(4 * C, C, device=dev)
    bias = torch.randn(4 * C, device=dev)
    row("matmul_forward (fc)", "8192x768 @ 768x3072 +bias", time_ms(lambda: F.linear(x, W, bias)), 0, 2 * N * C * 4 * C)
    hs = C // NH
    q, k, v = (torch.randn(B, NH, T, hs, device=dev) for _ in range(3))
    flops = 4 * B * NH * T * T * hs / 2
    row("attention_forward (fp32)", "B 8, NH 12, T 1024, hs 64",
        time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)), 0, flops)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True)
    go = torch.randn_like(o)
    row("attention_backward (fp32)", "B 8, NH 12, T 1024, hs 64",
        time_ms(lambda: torch.autograd.grad(o, (qg, kg, vg), go, retain_graph=True)), 0, 2.5 * flops)
    qb, kb, vb = (t.bfloat16() for t in (q, k, v))
    # bf16 through two of scaled_dot_product_attention's fused backends: FlashAttention-2 (the
    # issue's yardstick) and cuDNN's fused attention (the alternative the issue names for Loom).
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backends = (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))
    except ImportError:  # PyTorch before 2.3
        print("attention (bf16): torch.nn.attention.sdpa_kernel not in this PyTorch")
        backends = ()
    for label, backend in backends:
        try:
            with sdpa_kernel(backend):
                row(f"attention_forward (bf16 {label})", "B 8, NH 12, T 1024, hs 64",
                    time_ms(lambda: F.scaled_dot_product_attention(qb, kb, vb, is_causal=True)), 0, flops)
                qbg, kbg, vbg = (t.clone().requires_grad_() for t in (qb, kb, vb))
                ob = F.scaled_dot_product_attention(qbg, kbg, vbg, is_causal=True)
                gob = torch.randn_like(ob)
                row(f"attention_backward (bf16 {label})", "B 8, NH 12, T 1024, hs 64",
                    time_ms(lambda: torch.autograd.grad(ob, (qbg, kbg, vbg), gob, retain_graph=True)), 0,
                    2.5 * flops)
        except RuntimeError as e:  # a backend this build or device lacks
            print(f"attention (bf16 {label}): not available: {str(e).splitlines()[0]}")
    logits = torch.randn(N, Vp, device=dev)
    tgt = torch.randint(0, 50257, (N,), device=dev)
    row("softmax_crossentropy", "N 8192 x Vp 50304", time_ms(lambda: F.cross_entropy(logits, tgt), 5),
        3 * N * Vp * 4)
    P = 124_000_000
    p = torch.nn.Parameter(torch.randn(P, device=dev))
    p.grad = torch.randn(P, device=dev)
    opt = torch.optim.AdamW([p], lr=1e-4, betas=(0.9, 0.95), fused=True)
    row("adamw_update (fused)", "124M parameters", time_ms(lambda: opt.step(), 5), 7 * P * 4)


if __name__ == "__main__":
    main()
