# `loom eval --choices`: multiple-choice items (HellaSwag-style, completion scoring) against the
# independent numpy GPT-2 (tests/pretrained/gpt2_numpy.py). Random items in llm.c's eval-file
# layout (one whose context must be cut on the left to fit 32 positions), and text items in
# HellaSwag's JSON lines through the byte tokenizer: every ending's summed loss within 1e-4 of
# numpy's float64 forward, the predictions and the acc/acc_norm line the same; one rank and two
# (the items dealt out and gathered back in order) agree; bad input is refused, naming it.
source "$(dirname "$0")/common.sh"
PY=/usr/bin/python3
REF="$SRC/tests/pretrained/gpt2_numpy.py"
cd "$WORK"
$PY "$REF" make-hf hf --layers 2 --heads 4 --embd 64 --vocab 300 --positions 32 --seed 3
$PY - "$REF" <<'PY'
import json, random, sys
import numpy as np
sys.path.insert(0, sys.argv[1].rsplit("/", 1)[0])
import gpt2_numpy as ref

rng = random.Random(5)
T = 32

def write_llmc(path, items):
    stream = []
    for idx, (label, ctx, ends) in enumerate(items):
        s = [65535, 0, idx, label, len(ends), len(ctx)] + ctx
        for e in ends:
            s += [len(e)] + e
        s[1] = 2 * len(s)
        stream += s
    h = np.zeros(256, np.int32)
    h[:4] = [20240522, 1, len(items), 0]
    with open(path, "wb") as f:
        f.write(h.tobytes() + np.array(stream, np.uint16).tobytes())

def expected(items, out):
    """Each ending's summed loss: the row is the last T + 1 tokens of context + ending (as
    lm-evaluation-harness cuts), every token but the last an input."""
    cfg, w = ref.load_hf("hf")
    rows = []
    for label, ctx, ends in items:
        loss, n, cut = [], [], 0
        for e in ends:
            toks = ctx + e
            drop = max(0, len(toks) - (T + 1))
            toks = toks[drop:]
            cut = max(cut, drop)
            logits = ref.gpt2_logits(cfg, w, toks[:-1])
            lp = logits - logits.max(-1, keepdims=True)
            lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
            m = len(e)
            loss.append(float(-sum(lp[len(toks) - m - 1 + j, e[j]] for j in range(m))))
            n.append(m)
        rows.append({"label": label, "loss": loss, "tokens": n, "truncated": cut})
    json.dump(rows, open(out, "w"))

# Token items: contexts of 2-12 tokens, one of 30 (cut by up to 5 to fit 33 tokens), endings of 1-8;
# one item whose ending fills all 32 positions after a single context token.
tok_items = []
for i in range(11):
    ctx = [rng.randrange(300) for _ in range(30 if i == 4 else rng.randint(2, 12))]
    ends = [[rng.randrange(300) for _ in range(rng.randint(1, 8))] for _ in range(4)]
    tok_items.append((rng.randrange(4), ctx, ends))
tok_items.append((1, [7], [[rng.randrange(300) for _ in range(32)], [5, 6]]))
write_llmc("items.bin", tok_items)
expected(tok_items, "items.expected.json")

# Text items (ASCII: the byte tokenizer's ids are the bytes), tokenized as llm.c does it: the
# context as it is, each ending after a space.
words = "the a man dog runs over hill slowly and then sits down on roof with tiles".split()
text_items, lines = [], []
for i in range(7):
    ctx = " ".join(rng.choice(words) for _ in range(rng.randint(1, 3)))
    ends = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 2))) for _ in range(4)]
    label = rng.randrange(4)
    lines.append(json.dumps({"ind": i, "ctx": ctx, "endings": ends, "label": label, "split": "val"}))
    text_items.append((label, list(ctx.encode()), [list((" " + e).encode()) for e in ends]))
open("items.jsonl", "w").write("\n".join(lines) + "\n")
expected(text_items, "text.expected.json")
PY
run() {  # name ranks micro_batch file [args...]
  local name=$1 np=$2 mb=$3 file=$4
  shift 4
  mpi -np "$np" "$LOOM" eval hf --choices "$file" --micro-batch "$mb" --items-out "$name.jsonl" "$@" > "$name.out" 2>&1 ||
    { cat "$name.out"; fail "$name: exit status $?"; }
  cat "$name.out"
}
run one 1 3 items.bin
run two 2 5 items.bin
run text 1 4 items.jsonl --tokenizer byte
grep -q "1 item(s) lost context tokens on the left to fit 32 positions" one.out || fail "the cut context is not said"
$PY - <<'PY'
import json, re
def check(got_file, want_file, out_file):
    got = [json.loads(l) for l in open(got_file)]
    want = json.load(open(want_file))
    assert [g["item"] for g in got] == list(range(len(want))), [g["item"] for g in got]
    worst, right, right_norm = 0.0, 0, 0
    for g, w in zip(got, want):
        assert g["label"] == w["label"] and g["tokens"] == w["tokens"] and g["truncated"] == w["truncated"], (g, w)
        for a, b in zip(g["loss"], w["loss"]):
            worst = max(worst, abs(a - b) / max(1.0, abs(b)))
        pred = min(range(len(w["loss"])), key=lambda e: w["loss"][e])
        norm = [l / n for l, n in zip(w["loss"], w["tokens"])]
        pred_norm = min(range(len(norm)), key=lambda e: norm[e])
        # (A near-tie could go either way in fp32; these random items have none closer than 1e-3.)
        assert g["pred"] == pred and g["pred_norm"] == pred_norm, (g, w)
        right += pred == w["label"]
        right_norm += pred_norm == w["label"]
    assert worst <= 1e-4, (got_file, worst)
    line = open(out_file).read()
    m = re.search(r"(\d+) multiple-choice items .*acc ([0-9.]+) \((\d+) right.*acc_norm ([0-9.]+) \((\d+) right", line)
    assert m and int(m[1]) == len(want) and int(m[3]) == right and int(m[5]) == right_norm, (line, right, right_norm)
    print(f"{got_file}: {len(want)} items, worst relative loss difference {worst:.1e}, acc {right}, acc_norm {right_norm}")
check("one.jsonl", "items.expected.json", "one.out")
check("two.jsonl", "items.expected.json", "two.out")
check("text.jsonl", "text.expected.json", "text.out")
PY
# --limit: the first items only.
mpi -np 1 "$LOOM" eval hf --choices items.bin --limit 3 > limit.out || fail "--limit 3: exit status $?"
grep -q ": 3 multiple-choice items" limit.out || fail "--limit 3 did not take 3 items: $(cat limit.out)"
# Refusals, each with exit status 2 and a message that names what is wrong.
refused() {  # expected-message loom-eval-args...
  local want=$1
  shift
  set +e
  mpi -np 1 "$LOOM" eval "$@" > refused.out 2>&1
  local rc=$?
  set -e
  [ "$rc" = 2 ] || { cat refused.out; fail "loom eval $*: exit $rc, expected 2"; }
  grep -qF -- "$want" refused.out || { cat refused.out; fail "loom eval $*: no '$want'"; }
}
refused "--items-out one.jsonl exists: loom eval does not overwrite it" hf --choices items.bin --items-out one.jsonl
refused "cannot tell which tokenizer the model uses" hf --choices items.jsonl
refused "excludes --choices" hf --choices items.bin --data "$WORK"
refused "--data (a token dataset) or --choices (multiple-choice items) is required" hf
sed 's/"label": [0-9]/"label": 7/' items.jsonl > badlabel.jsonl
refused "--choices badlabel.jsonl: line 1: label 7 names no ending (it has 4)" hf --choices badlabel.jsonl --tokenizer byte
head -c 1100 items.bin > cut.bin
refused "--choices cut.bin: example" hf --choices cut.bin
refused "tokens, more than the 4 positions that score them" hf --choices items.bin --seq-len 4
# Each rank reads its own copy of the items (node-local files, MPMD working directories): one
# whose copy differs (a label changed) is refused on every rank before any scoring, not left to
# score other items or wait in another number of forwards.
mkdir -p node_a node_b
cp items.bin node_a/
$PY - <<'PY'
data = bytearray(open("items.bin", "rb").read())
data[1024 + 6] ^= 1  # example 0's label (the fourth uint16 after the header)
open("node_b/items.bin", "wb").write(bytes(data))
PY
set +e
mpi -np 1 -wdir "$WORK/node_a" "$LOOM" eval "$WORK/hf" --choices items.bin : \
    -np 1 -wdir "$WORK/node_b" "$LOOM" eval "$WORK/hf" --choices items.bin > differ.out 2>&1
rc=$?
set -e
[ "$rc" = 2 ] || { cat differ.out; fail "ranks reading different items: exit $rc, expected 2"; }
grep -q "every rank must see the same multiple-choice items" differ.out || { cat differ.out; fail "the differing items are not named"; }
echo PASS
