# Pretrained weights in and out (issue 23): fixtures written by an independent numpy script
# (tests/pretrained/gpt2_numpy.py: safetensors and HF GPT-2 naming from their specs, GPT-2's
# forward in float64) are read by Loom and give the reference's logits; llm.c's layout imports;
# import -> export round-trips bit for bit; broken files give errors naming the file and tensor.
source "$(dirname "$0")/common.sh"
PY=/usr/bin/python3
REF="$SRC/tests/pretrained/gpt2_numpy.py"
TOKENS=5,17,250,3,99,42,7,0,299,128
# Loom's logits of TOKENS (every position) from model $1 into $2.
loom_logits() { "$LOOM" sample "$1" --prompt-tokens $TOKENS --max-tokens 0 --logits-out "$2" >/dev/null 2>&1 || fail "loom sample on $1"; }
close() {  # close A B TOL: max |A - B| <= TOL (float32 files)
  $PY - "$@" <<'PYEOF' || fail "logits differ: $1 vs $2"
import sys, numpy as np
a, b = np.fromfile(sys.argv[1], np.float32), np.fromfile(sys.argv[2], np.float32)
d = float(np.abs(a - b).max()) if a.shape == b.shape else float("inf")
print(f"  {sys.argv[1].split('/')[-1]} vs {sys.argv[2].split('/')[-1]}: max |diff| {d:.3g} over {a.size} logits")
sys.exit(0 if d <= float(sys.argv[3]) else 1)
PYEOF
}

# 1. HF layouts: prefixed F32, unprefixed BF16 with a tied lm_head, F16.
$PY "$REF" make-hf "$WORK/hf32"
$PY "$REF" make-hf "$WORK/hf_bf16" --dtype BF16 --no-prefix --lm-head --seed 2
$PY "$REF" make-hf "$WORK/hf_f16" --dtype F16 --seed 3
for m in hf32 hf_bf16 hf_f16; do
  $PY "$REF" logits "$WORK/$m" --tokens $TOKENS --out "$WORK/$m.ref"
  loom_logits "$WORK/$m" "$WORK/$m.loom"
  close "$WORK/$m.loom" "$WORK/$m.ref" 1e-5
done

# 2. llm.c: v3 (fp32) from the F32 fixture and v5 (bf16) from the BF16 one hold the same values,
# so Loom's logits must be the same bits as from the HF files.
$PY "$REF" make-llmc "$WORK/gpt2_v3.bin" --from "$WORK/hf32" --version 3
$PY "$REF" make-llmc "$WORK/gpt2_v5.bin" --from "$WORK/hf_bf16" --version 5
loom_logits "$WORK/gpt2_v3.bin" "$WORK/v3.loom"
loom_logits "$WORK/gpt2_v5.bin" "$WORK/v5.loom"
cmp -s "$WORK/v3.loom" "$WORK/hf32.loom" || fail "llm.c v3 logits differ from the HF fixture's"
cmp -s "$WORK/v5.loom" "$WORK/hf_bf16.loom" || fail "llm.c v5 logits differ from the BF16 HF fixture's"

# 3. import -> export: the exported tensors are the fixture's bit for bit; export -> import ->
# export gives the same files byte for byte.
"$LOOM" import "$WORK/hf32" --out "$WORK/ck1" >/dev/null
"$LOOM" export "$WORK/ck1" --out "$WORK/ex1" >/dev/null
$PY "$REF" same-tensors "$WORK/hf32" "$WORK/ex1" || fail "import -> export changed tensors"
"$LOOM" import "$WORK/ex1" --out "$WORK/ck2" >/dev/null
"$LOOM" export "$WORK/ck2" --out "$WORK/ex2" >/dev/null
for f in model.safetensors config.json; do cmp "$WORK/ex1/$f" "$WORK/ex2/$f" || fail "$f not byte-identical"; done
"$LOOM" import "$WORK/gpt2_v3.bin" --out "$WORK/ck3" >/dev/null
"$LOOM" export "$WORK/ck3" --out "$WORK/ex3" >/dev/null
$PY "$REF" same-tensors "$WORK/hf32" "$WORK/ex3" || fail "llm.c -> Loom -> HF changed tensors"
# bf16 export: the reader sees the bf16-rounded weights; the logits stay close.
"$LOOM" export "$WORK/ck1" --out "$WORK/ex_bf16" --dtype bf16 >/dev/null
grep -q '"torch_dtype": "bfloat16"' "$WORK/ex_bf16/config.json" || fail "bf16 export's config"
$PY "$REF" logits "$WORK/ex_bf16" --tokens $TOKENS --out "$WORK/ex_bf16.ref"
close "$WORK/ex_bf16.ref" "$WORK/hf32.ref" 5e-3
# Never over an existing model.
set +e
"$LOOM" export "$WORK/ck1" --out "$WORK/ex1" 2> "$WORK/err"; rc=$?
set -e
[ "$rc" = 2 ] && grep -q "already exists" "$WORK/err" || fail "export over an existing directory: rc $rc, $(cat "$WORK/err")"
"$LOOM" import "$WORK/hf32" --out "$WORK/ck1" 2> "$WORK/err" && fail "import over an existing checkpoint.dir"
grep -q "already exists" "$WORK/err" || fail "import over existing: $(cat "$WORK/err")"
# Import and export run as one process: under mpirun -n 2 both refuse (exit 2) and write nothing.
for cmd in "import $WORK/hf32 --out $WORK/mpi_ck" "export $WORK/ck1 --out $WORK/mpi_ex"; do
  set +e
  # shellcheck disable=SC2086
  timeout 60 "$MPIEXEC" --oversubscribe --bind-to none -np 2 "$LOOM" $cmd > /dev/null 2> "$WORK/err"; rc=$?
  set -e
  [ "$rc" = 2 ] && grep -q "loom ${cmd%% *} runs as one process" "$WORK/err" ||
    fail "${cmd%% *} under mpirun -n 2: rc $rc, $(cat "$WORK/err")"
done
[ ! -e "$WORK/mpi_ck" ] && [ ! -e "$WORK/mpi_ex" ] || fail "import/export under mpirun -n 2 wrote something"

# 4. Broken inputs: exit 2, and the message names the file and what is wrong.
expect_error() {  # expect_error KIND PATTERN
  $PY "$REF" make-hf "$WORK/bad_$1" --break "$1"
  set +e
  "$LOOM" import "$WORK/bad_$1" --out "$WORK/bad_ck_$1" 2> "$WORK/err"; rc=$?
  set -e
  [ "$rc" = 2 ] || fail "--break $1: exit status $rc"
  grep -q -- "$2" "$WORK/err" || fail "--break $1: expected '$2' in: $(cat "$WORK/err")"
  [ ! -e "$WORK/bad_ck_$1/step_00000000" ] || fail "--break $1 left a checkpoint"
  echo "  --break $1: $(cut -c1-160 "$WORK/err")"
}
expect_error missing "no tensor 'transformer.h.0.mlp.c_fc.bias'"
expect_error shape "tensor .transformer.h.0.attn.c_proj.weight. (Loom.s h.0.attn.proj.weight), a Conv1D weight stored \[in, out\] and read transposed, is stored as \[64, 65\], the model needs it stored as \[64, 64\]"
expect_error truncate "model.safetensors"
expect_error offsets "model.safetensors"
expect_error activation "activation_function"
head -c 600 "$WORK/gpt2_v3.bin" > "$WORK/short.bin"
"$LOOM" import "$WORK/short.bin" --out "$WORK/short_ck" 2> "$WORK/err" && fail "a truncated llm.c file imported"
grep -q "short.bin: truncated" "$WORK/err" || fail "truncated llm.c: $(cat "$WORK/err")"
head -c 4096 "$WORK/gpt2_v3.bin" > "$WORK/cut.bin"
"$LOOM" import "$WORK/cut.bin" --out "$WORK/cut_ck" 2> "$WORK/err" && fail "a cut llm.c file imported"
grep -q "cut.bin: 4096 bytes, but its header .* says .* (truncated)" "$WORK/err" || fail "cut llm.c: $(cat "$WORK/err")"
# --logits-out where nothing can be written: refused before the model is read (exit 2, the
# reason named), not after the work through MPI_Abort.
for bad in /nonexistent/x.f32 "$WORK"; do
  set +e
  "$LOOM" sample "$WORK/hf32" --prompt-tokens $TOKENS --max-tokens 0 --logits-out "$bad" > "$WORK/lo.out" 2>&1; rc=$?
  set -e
  [ "$rc" = 2 ] || { cat "$WORK/lo.out"; fail "--logits-out $bad exited $rc, expected 2"; }
  grep -q -- "--logits-out $bad: \(the directory .* does not exist\|is a directory\)" "$WORK/lo.out" ||
    { cat "$WORK/lo.out"; fail "--logits-out $bad: no reason given"; }
  grep -q "MPI_ABORT" "$WORK/lo.out" && fail "--logits-out $bad: MPI_Abort"
done
echo PASS
