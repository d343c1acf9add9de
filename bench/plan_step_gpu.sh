#!/usr/bin/env bash
# The plan_step bench on a machine of 2 GPUs, one process per GPU (each process: one model, its configurations in
# order, so that ratios are measured side by side on one GPU); plans made beforehand without a GPU:
#     for m in resnet50 gpt2 llama; do python3 bench/plan_step_bench.py --model $m --make-plans .carry_plans --gpu h200; done
#     bash bench/plan_step_gpu.sh 1   # GPT-2 and Llama
#     bash bench/plan_step_gpu.sh 2   # ResNet-50; the three under deterministic algorithms
#     bash bench/plan_step_gpu.sh 3   # plans made for compile (--for-compile, in $PLANS/compiled) beside compile's
#                                     # budgets: GPT-2 and Llama (one GPU each)
#     bash bench/plan_step_gpu.sh 4   # the same for ResNet-50 (compile's low budgets) on GPU 0 alone
# Output (JSON lines and logs) under $OUT (default bench/results/plan_step_out).
set -u
OUT=${OUT:-bench/results/plan_step_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false
P=${PLANS:-.carry_plans}
run() {
  local g=$1 n=$2; shift 2
  CUDA_VISIBLE_DEVICES=$g TORCHINDUCTOR_CACHE_DIR=/tmp/inductor$g timeout "${LIMIT:-570}" \
    python3 bench/plan_step_bench.py --gpu h200 --plans "${PLANS:-$P}" "$@" --out "$OUT/$n.jsonl" > "$OUT/$n.log" 2>&1
  echo "$n rc=$?" >> "$OUT/rc.txt"
}
# each process: eager, per-block checkpointing, memplan's plans in eager, some under compile, then compile's budgets
# (most telling first; a process cut by the limit loses the last ones: run them again with COMPILE_BUDGETS)
B=${COMPILE_BUDGETS:-1.0,0.0,0.4,0.6,0.2,0.8,0.1}
case "${1:-1}" in
  1)
    run 0 gpt2 --model gpt2 --memplan-compile 2 --compile-budgets "$B" &
    run 1 llama --model llama --memplan-compile 2 --compile-budgets "$B" &
    ;;
  2)
    run 0 resnet50 --model resnet50 --memplan-compile 2 --compile-budgets "$B" &
    ( for m in gpt2 llama resnet50; do  # losses bit for bit: deterministic kernels, a few plans
        run 1 "${m}_deterministic" --model $m --deterministic --configs checkpoint,memplan --memplan-plans 4
      done
      # plans made for compile (selective checkpointing where the compiler applies it at trace time)
      PLANS=$P/compiled run 1 gpt2_for_compile --model gpt2 --configs memplan_compile --memplan-compile 4 ) &
    ;;
  3)
    PLANS=$P/compiled run 0 gpt2_for_compile --model gpt2 --configs compile,memplan_compile --memplan-compile "${N:-5}" \
      --compile-budgets "${COMPILE_BUDGETS:-1.0,0.8,0.6,0.4,0.2}" &
    PLANS=$P/compiled run 1 llama_for_compile --model llama --configs compile,memplan_compile --memplan-compile "${N:-5}" \
      --compile-budgets "${COMPILE_BUDGETS:-1.0,0.8,0.6,0.4,0.2}" &
    ;;
  4)
    PLANS=$P/compiled run 0 resnet50_for_compile --model resnet50 --configs compile,memplan_compile --memplan-compile "${N:-4}" \
      --compile-budgets "${COMPILE_BUDGETS:-0.4,0.2,0.1}" &
    ;;
  *)  # one model's remaining compile budgets: bash bench/plan_step_gpu.sh gpt2 (with COMPILE_BUDGETS)
    run 1 "$1_compile" --model "$1" --configs compile --compile-budgets "$B" &
    ;;
esac
wait
{ nvidia-smi --query-gpu=name,driver_version --format=csv
  python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"; } > "$OUT/machine.txt" 2>&1
