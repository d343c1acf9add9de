#!/usr/bin/env bash
# GPU-machine calls (device tool) after `bench/cuda_bench.sh pack`: `bench/gpu_final.sh tests`: the CUDA tests, the NCCL one-rank tests (ZeRO
# included) and the planned allocator's library test; `bench/gpu_final.sh alloc`: the planned PyTorch allocator against PyTorch's (bench/torch_allocator.py), each bounded in time; writes
# summaries under $OUT (default bench/results/gpu_run).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results/gpu_run}"
mkdir -p "$OUT"
source <(sed -n '/^extra=/,/^export MEMPLAN_SOURCE_DIR/p' bench/cuda_bench.sh)
export MEMPLAN_TORCH_LIB="$PWD/.carry/lib/libmemplan_torch.so" MEMPLAN_BIN="$PWD/.carry/bin/memplan" PYTHONPATH="$PWD/python"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/device.txt"
t0=$(date +%s)
if [[ "${1:-tests}" == tests ]]; then
timeout 300 bash bench/cuda_bench.sh test > "$OUT/.cuda_tests.log" 2>&1; echo "cuda tests exit $?" > "$OUT/summary_${1:-tests}.txt"
tail -4 "$OUT/.cuda_tests.log" >> "$OUT/summary_${1:-tests}.txt"; grep -B3 -A12 "ERROR:" "$OUT/.cuda_tests.log" | head -80 >> "$OUT/summary_${1:-tests}.txt"
echo "cuda tests: $(( $(date +%s) - t0 )) s" >> "$OUT/summary_${1:-tests}.txt"
timeout 120 bash bench/cuda_bench.sh nccl >> "$OUT/summary_${1:-tests}.txt" 2>&1
timeout 60 .carry/bin/test_torch_allocator -tc='libmemplan_torch.so*' 2>&1 | tail -3 >> "$OUT/summary_${1:-tests}.txt"
echo "nccl + allocator tests: $(( $(date +%s) - t0 )) s" >> "$OUT/summary_${1:-tests}.txt"
fi
if [[ "${1:-tests}" == alloc ]]; then
timeout "${ALLOC_SECONDS:-540}" python3 bench/torch_allocator.py --lib "$MEMPLAN_TORCH_LIB" --only "${ALLOC_MODELS:-gpt2,resnet50}" \
  --time-reps 3 --out "$OUT/torch_allocator.json" > "$OUT/.torch_allocator.txt" 2> "$OUT/.torch_allocator.err"; echo "torch_allocator exit $?" >> "$OUT/summary_${1:-tests}.txt"
tail -n 12 "$OUT/.torch_allocator.txt" "$OUT/.torch_allocator.err" >> "$OUT/summary_${1:-tests}.txt"
fi
echo "total: $(( $(date +%s) - t0 )) s" >> "$OUT/summary_${1:-tests}.txt"
rm -f "$OUT"/.*.log "$OUT"/.*.err "$OUT"/.*.txt
