#!/usr/bin/env bash
# Transformer training on the GPU machine, memplan beside PyTorch in one run (issue 14's figures).
# Needs the carried build (bench/cuda_bench.sh pack). Usage: bench/transformer_gpu.sh OUTDIR [MODELS] [STEPS]
# Env: MODELS_DIR (default samples/transformers: where MODEL.train.onnx lies; held-out exports of
# bench/export_transformers.py elsewhere), FUSE (default "1 0": the fused and unfused runs), EXTRA (default 1: the
# attention and fused-chain benches of step 3; 0 skips them).
#   1. PyTorch eager training steps (fp32, TF32 off, MSE loss, no optimizer), SDPA and eager attention:
#      peak over baseline and step time (bench/torch_transformer_peaks.py);
#   2. memplan's CUDA training step of the same model (its TorchScript training export in samples/transformers,
#      fused, strategy none, optimizer none, synthesized weights): arena, device memory, step time
#      (bench_cuda train ... fuse=1), and the same unfused (fuse=0) for comparison;
#   3. FusedAttention forward+backward against torch SDPA at the same shapes (bench_attention,
#      bench/torch_sdpa_bench.py); the fused 8-op chain against torch eager / torch.compile and a copy
#      (bench_cuda fused, bench/torch_fused_chain.py).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:?usage: transformer_gpu.sh OUTDIR [MODELS] [STEPS]}"
MODELS="${2:-bert_small,gpt2_small,llama_gqa,qwen2_gqa,phi_small,t5_encoder,deit_tiny,swin_tiny}"
STEPS="${3:-10}"
mkdir -p "$OUT"
source <(sed -n '/^extra=/,/^export MEMPLAN_SOURCE_DIR/p' bench/cuda_bench.sh)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
python3 bench/torch_transformer_peaks.py --only "$MODELS" --optimizer none --steps "$STEPS" --warmup 3 \
  --json "$OUT/torch_peaks.json" > "$OUT/torch_peaks.txt" 2>&1
MODELS_DIR="${MODELS_DIR:-samples/transformers}"
for m in ${MODELS//,/ }; do
  family=$(python3 -c "import sys; sys.path.insert(0, 'bench'); import transformer_zoo as z; print(z.MODELS['$m'].family)")
  case $family in vision) dims="batch=32" ;; *) dims="batch=8 seq=256" ;; esac
  for f in ${FUSE:-1 0}; do
    timeout 240 .carry/bin/bench_cuda train "$MODELS_DIR/$m.train.onnx" "$STEPS" $dims optimizer=none \
      strategies=none fuse=$f > "$OUT/memplan_${m}_fuse$f.json" 2> "$OUT/memplan_${m}_fuse$f.err"
  done
done
if [ "${EXTRA:-1}" != 0 ]; then
.carry/bin/bench_attention > "$OUT/memplan_attention.json" 2> "$OUT/memplan_attention.err" || true
python3 bench/torch_sdpa_bench.py > "$OUT/torch_sdpa.json" 2> "$OUT/torch_sdpa.err" || true
.carry/bin/bench_cuda fused $((1 << 28)) > "$OUT/memplan_fused_chain.json" 2> "$OUT/memplan_fused_chain.err" || true
python3 bench/torch_fused_chain.py > "$OUT/torch_fused_chain.json" 2> "$OUT/torch_fused_chain.err" || true
fi
python3 bench/transformer_gpu_summary.py "$OUT" > "$OUT/summary.txt"; cat "$OUT/summary.txt"
