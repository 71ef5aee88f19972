# The batch templates' parallel.tp default (slurm/loom_job.sh's loom_default_tp) on 2 nodes of
# 8 and of 4 GPUs, for every shipped GPT-2 recipe: a tp that divides model.n_head and the GPUs
# per node (the recipe's own when above 1), and that loom accepts for the whole allocation.
# (It once took the largest divisor of n_head up to the GPUs per node, ignoring the node: tp 6
# for GPT-2 124M on 8-GPU nodes, which no world of whole nodes divides.)
source "$(dirname "$0")/../cli/common.sh"
cd "$SRC"
check() {  # check RECIPE GPUS_PER_NODE EXPECTED
  local got
  got=$(SLURM_GPUS_PER_NODE=$2 SLURM_TASKS_PER_NODE="$2(x2)" LOOM=$LOOM RECIPE=$1 \
        bash -c 'source slurm/loom_job.sh; loom_default_tp')
  [ "$got" = "$3" ] || fail "$1 on 2 nodes of $2 GPUs: tp $got, expected $3"
  "$LOOM" config "$1" --world $(( 2 * $2 )) --set parallel.tp="$got" > /dev/null ||
    fail "$1 on 2 nodes of $2 GPUs: loom refuses the default tp $got"
  echo "$1, 2 nodes of $2 GPUs: tp $got"
}
check configs/gpt2-124m.yaml 8 4    # 12 heads
check configs/gpt2-124m.yaml 4 4
check configs/gpt2-350m.yaml 8 8    # 16 heads
check configs/gpt2-774m.yaml 8 4    # the recipe's own tp 4 (20 heads)
check configs/gpt2-1558m.yaml 8 1   # 25 heads; the recipe's pp 2
check configs/gpt2-1558m.yaml 4 1
# Nodes given unequal task counts (8 and 4: a world of 12): a tp the world divides too.
got=$(SLURM_GPUS_PER_NODE=8 SLURM_TASKS_PER_NODE="8,4" LOOM=$LOOM RECIPE=configs/gpt2-350m.yaml \
      bash -c 'source slurm/loom_job.sh; loom_default_tp')
[ "$got" = 4 ] || fail "gpt2-350m over 8 + 4 tasks: tp $got, expected 4"
"$LOOM" config configs/gpt2-350m.yaml --world 12 --set parallel.tp="$got" --set train.global_batch=auto > /dev/null ||
  fail "gpt2-350m over 8 + 4 tasks: loom refuses the default tp $got"
# Without GPUs, 1; a GPU count written as type:count is read.
[ "$(SLURM_GPUS_PER_NODE= LOOM=$LOOM RECIPE=configs/gpt2-124m.yaml bash -c 'source slurm/loom_job.sh; loom_default_tp')" = 1 ] ||
  fail "no GPUs: tp is not 1"
[ "$(SLURM_GPUS_PER_NODE=a100:8 LOOM=$LOOM RECIPE=configs/gpt2-124m.yaml bash -c 'source slurm/loom_job.sh; loom_default_tp')" = 4 ] ||
  fail "a100:8: tp is not 4"
echo PASS
