#!/usr/bin/python3
"""An independent GPT-2 reference in numpy, written from the safetensors format description and
Hugging Face's GPT-2 naming (transformers' GPT2LMHeadModel), sharing no code with Loom. The tests
use it to make fixtures Loom must import and to check what Loom exports.

  make-hf DIR [--layers L --heads H --embd C --vocab V --positions P --seed S --dtype F32|BF16|F16
               --no-prefix --lm-head --break KIND]   random GPT-2 weights as an HF directory
  make-llmc FILE --from DIR [--version 3|5]          the same weights in llm.c's .bin layout
  logits DIR --tokens 1,2,3 --out FILE               float32 logits [T, V] of one sequence
  same-tensors DIR_A DIR_B                           exit 0 iff both hold bit-identical tensors
  check-merge BASE MERGED PEFT                       a merged LoRA export = base + scale * B A
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16}


def bf16_bits(x):
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = blob[base + b:base + end]
        if e["dtype"] == "BF16":
            arr = bf16_to_f32(np.frombuffer(raw, dtype="<u2"))
        else:
            arr = np.frombuffer(raw, dtype={"F32": "<f4", "F16": "<f2"}[e["dtype"]]).astype(np.float32)
        out[name] = arr.reshape(e["shape"])
    return out, header


def write_safetensors(path, tensors, dtype):
    header, chunks, at = {}, [], 0
    for name, arr in tensors.items():
        if dtype == "BF16":
            raw = bf16_bits(arr).astype("<u2").tobytes()
        else:
            raw = np.ascontiguousarray(arr, dtype=DTYPES[dtype]).astype(np.dtype(DTYPES[dtype]).newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)


def hf_names(L):
    names = ["wte.weight", "wpe.weight"]
    for i in range(L):
        for m in ["ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"]:
            names += [f"h.{i}.{m}.weight", f"h.{i}.{m}.bias"]
    return names + ["ln_f.weight", "ln_f.bias"]


def random_gpt2(L, H, C, V, P, seed):
    rng = np.random.default_rng(seed)
    n = lambda *s, sd=0.02: (rng.standard_normal(s) * sd).astype(np.float32)
    w = {"wte.weight": n(V, C), "wpe.weight": n(P, C, sd=0.01)}
    for i in range(L):
        h = f"h.{i}."
        w[h + "ln_1.weight"] = 1 + n(C, sd=0.1)
        w[h + "ln_1.bias"] = n(C, sd=0.1)
        w[h + "attn.c_attn.weight"] = n(C, 3 * C, sd=0.08)   # Conv1D: [in, out]
        w[h + "attn.c_attn.bias"] = n(3 * C, sd=0.05)
        w[h + "attn.c_proj.weight"] = n(C, C, sd=0.05)
        w[h + "attn.c_proj.bias"] = n(C, sd=0.05)
        w[h + "ln_2.weight"] = 1 + n(C, sd=0.1)
        w[h + "ln_2.bias"] = n(C, sd=0.1)
        w[h + "mlp.c_fc.weight"] = n(C, 4 * C, sd=0.05)
        w[h + "mlp.c_fc.bias"] = n(4 * C, sd=0.05)
        w[h + "mlp.c_proj.weight"] = n(4 * C, C, sd=0.05)
        w[h + "mlp.c_proj.bias"] = n(C, sd=0.05)
    w["ln_f.weight"] = 1 + n(C, sd=0.1)
    w["ln_f.bias"] = n(C, sd=0.1)
    return w


def make_hf(a):
    os.makedirs(a.dir, exist_ok=False)
    w = random_gpt2(a.layers, a.heads, a.embd, a.vocab, a.positions, a.seed)
    prefix = "" if a.no_prefix else "transformer."
    tensors = {prefix + k: v for k, v in w.items()}
    if a.lm_head:
        tensors["lm_head.weight"] = w["wte.weight"]
    cfg = {"model_type": "gpt2", "n_layer": a.layers, "n_head": a.heads, "n_embd": a.embd,
           "n_positions": a.positions, "vocab_size": a.vocab, "layer_norm_epsilon": 1e-5,
           "activation_function": "gelu_new"}
    if a.break_ == "missing":
        del tensors[prefix + "h.0.mlp.c_fc.bias"]
    if a.break_ == "shape":
        tensors[prefix + "h.0.attn.c_proj.weight"] = np.zeros((a.embd, a.embd + 1), np.float32)
    if a.break_ == "activation":
        cfg["activation_function"] = "relu"
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    st = os.path.join(a.dir, "model.safetensors")
    write_safetensors(st, tensors, a.dtype)
    if a.break_ == "truncate":
        os.truncate(st, os.path.getsize(st) - 100)
    if a.break_ == "offsets":  # the last tensor's end moved past the file, length kept
        with open(st, "rb") as f:
            blob = bytearray(f.read())
        (n,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8:8 + n])
        last = max((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][1])
        header[last]["data_offsets"][1] += 1 << 20
        h = json.dumps(header).encode()
        h += b" " * ((8 - len(h) % 8) % 8)
        with open(st, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + blob[8 + n:])


def load_hf(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    t, _ = read_safetensors(os.path.join(d, "model.safetensors"))
    t = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in t.items()}
    return cfg, t


def make_llmc(a):
    cfg, w = load_hf(a.src)
    L, H, C, V, P = cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
    Vp = (V + 127) // 128 * 128
    header = np.zeros(256, np.int32)
    header[:8] = [20240326, a.version, P, V, L, H, C, Vp]
    wte = np.zeros((Vp, C), np.float32)
    wte[:V] = w["wte.weight"]
    stack = lambda key, tr=False: np.stack([(w[f"h.{i}.{key}"].T if tr else w[f"h.{i}.{key}"]) for i in range(L)])
    order = [wte, w["wpe.weight"], stack("ln_1.weight"), stack("ln_1.bias"),
             stack("attn.c_attn.weight", True), stack("attn.c_attn.bias"),
             stack("attn.c_proj.weight", True), stack("attn.c_proj.bias"),
             stack("ln_2.weight"), stack("ln_2.bias"), stack("mlp.c_fc.weight", True), stack("mlp.c_fc.bias"),
             stack("mlp.c_proj.weight", True), stack("mlp.c_proj.bias"), w["ln_f.weight"], w["ln_f.bias"]]
    with open(a.file, "xb") as f:
        f.write(header.astype("<i4").tobytes())
        for t in order:
            if a.version == 3:
                f.write(np.ascontiguousarray(t, dtype="<f4").tobytes())
            else:
                f.write(bf16_bits(t).astype("<u2").tobytes())


def gpt2_logits(cfg, w, tokens):
    """GPT-2's forward pass in float64: pre-LN blocks, causal attention, tanh GELU, tied head."""
    L, H, C = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    g = lambda k: w[k].astype(np.float64)
    T = len(tokens)
    x = g("wte.weight")[tokens] + g("wpe.weight")[:T]

    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * g(p + ".weight") + g(p + ".bias")

    hs = C // H
    mask = np.triu(np.ones((T, T), bool), 1)
    for i in range(L):
        p = f"h.{i}."
        qkv = ln(x, p + "ln_1") @ g(p + "attn.c_attn.weight") + g(p + "attn.c_attn.bias")  # Conv1D: x @ W
        q, k, v = np.split(qkv, 3, axis=-1)
        q, k, v = (m.reshape(T, H, hs).transpose(1, 0, 2) for m in (q, k, v))
        att = q @ k.transpose(0, 2, 1) / math.sqrt(hs)
        att[:, mask] = -np.inf
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        y = (att @ v).transpose(1, 0, 2).reshape(T, C)
        x = x + y @ g(p + "attn.c_proj.weight") + g(p + "attn.c_proj.bias")
        h = ln(x, p + "ln_2") @ g(p + "mlp.c_fc.weight") + g(p + "mlp.c_fc.bias")
        h = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
        x = x + h @ g(p + "mlp.c_proj.weight") + g(p + "mlp.c_proj.bias")
    return ln(x, "ln_f") @ g("wte.weight").T


def logits(a):
    cfg, w = load_hf(a.dir)
    tokens = [int(t) for t in a.tokens.split(",")]
    gpt2_logits(cfg, w, tokens).astype("<f4").tofile(a.out)


def same_tensors(a):
    _, x = load_hf(a.a)
    _, y = load_hf(a.b)
    x.pop("lm_head.weight", None)
    y.pop("lm_head.weight", None)
    if sorted(x) != sorted(y):
        print("different tensor names:", sorted(set(x) ^ set(y)))
        return 1
    bad = [k for k in x if x[k].shape != y[k].shape or x[k].tobytes() != y[k].tobytes()]
    if bad:
        print("tensors differ:", bad[:5])
        return 1
    print(f"{len(x)} tensors bit-identical")
    return 0


def check_merge(a):
    """The merged export equals base + (alpha / r) * B A on every adapted weight (Conv1D: its
    transpose), and every other tensor is the base's, bit for bit."""
    _, base = load_hf(a.base)
    _, merged = load_hf(a.merged)
    cfg = json.load(open(os.path.join(a.peft, "adapter_config.json")))
    ad, _ = read_safetensors(os.path.join(a.peft, "adapter_model.safetensors"))
    scale = cfg["lora_alpha"] / cfg["r"]
    adapted = set()
    worst = 0.0
    for name in ad:
        if not name.endswith(".lora_A.weight"):
            continue
        module = name[len("base_model.model.transformer."):-len(".lora_A.weight")]
        A = ad[name].astype(np.float64)
        B = ad[name.replace("lora_A", "lora_B")].astype(np.float64)
        assert A.shape[0] == cfg["r"] and B.shape[1] == cfg["r"], (name, A.shape, B.shape)
        want = base[module + ".weight"].astype(np.float64) + scale * (B @ A).T  # Conv1D [in, out]
        got = merged[module + ".weight"].astype(np.float64)
        err = float(np.abs(got - want).max() / max(1e-30, np.abs(want).max()))
        worst = max(worst, err)
        adapted.add(module + ".weight")
    assert adapted, "no adapters"
    same = [k for k in base if k not in adapted and k != "lm_head.weight"]
    bad = [k for k in same if base[k].tobytes() != merged[k].tobytes()]
    assert not bad, f"frozen tensors changed: {bad[:5]}"
    print(f"{len(adapted)} adapted weights = base + {scale:g} * B A (max relative error {worst:.2e}); "
          f"{len(same)} other tensors bit-identical to the base")
    return 0 if worst < 1e-6 else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-hf")
    m.add_argument("dir")
    for k, v in [("layers", 2), ("heads", 4), ("embd", 64), ("vocab", 300), ("positions", 32), ("seed", 1)]:
        m.add_argument("--" + k, type=int, default=v)
    m.add_argument("--dtype", default="F32", choices=["F32", "BF16", "F16"])
    m.add_argument("--no-prefix", action="store_true")
    m.add_argument("--lm-head", action="store_true")
    m.add_argument("--break", dest="break_", choices=["missing", "shape", "truncate", "offsets", "activation"])
    c = sub.add_parser("make-llmc")
    c.add_argument("file")
    c.add_argument("--from", dest="src", required=True)
    c.add_argument("--version", type=int, default=3, choices=[3, 5])
    g = sub.add_parser("logits")
    g.add_argument("dir")
    g.add_argument("--tokens", required=True)
    g.add_argument("--out", required=True)
    s = sub.add_parser("same-tensors")
    s.add_argument("a")
    s.add_argument("b")
    k = sub.add_parser("check-merge")
    k.add_argument("base")
    k.add_argument("merged")
    k.add_argument("peft")
    a = p.parse_args()
    return {"make-hf": make_hf, "make-llmc": make_llmc, "logits": logits, "same-tensors": same_tensors,
            "check-merge": check_merge}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
