#!/usr/bin/env bash
# CUDA benchmark in one command. `bench/cuda_bench.sh pack` (on the build machine) copies the test and
# bench executables with their Debian libraries into .carry/; `bench/cuda_bench.sh run [OUTDIR]` (on the
# GPU machine) runs the CUDA tests, the tiny models, the fusion bandwidth bench, training steps under each
# remat strategy (bench_cuda train) beside PyTorch (bench/torch_train.py), compute-sanitizer memcheck and
# racecheck, the planned cuDNN workspaces (`workspace` alone), and writes OUTDIR/cuda.json (default
# bench/results). `test [FILTER]` runs the GPU tests alone; `yardstick [OUTDIR]` runs bench/pytorch_yardstick.py
# with memplan's plans measured on the same GPU. `attention [OUTDIR]` runs the attention kernels' GPU tests, the
# sanitizers on one of them, and bench_attention beside bench/torch_sdpa_bench.py (cuda_attention*.json).
# `nccl [multi [OUT.json [ARGS...]]]` runs the NCCL data-parallel GPU tests (and bench/multi_gpu.py ARGS under torchrun on every GPU).
set -uo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-run}" == pack ]]; then
  set -e
  rm -rf .carry && mkdir -p .carry/bin .carry/lib
  for exe in build/test_runtime_allocator build/test_torch_allocator build/bench_cuda build/bench_attention build/memplan \
             build/libmemplan_torch.so; do
    [ -e "$exe" ] || continue
    case "$exe" in *.so) cp -f "$exe" .carry/lib/ ;; *) cp -f "$exe" .carry/bin/ ;; esac
    ldd "$exe" | awk '/=> \//{print $3}' | while read -r lib; do
      case "$lib" in  # glibc and the CUDA toolkit's own libraries are on the GPU machine already
        */libc.so*|*/libm.so*|*/libpthread.so*|*/libdl.so*|*/librt.so*|*/ld-linux*|*/libcuda.so*|/usr/local/cuda*) ;;
        *) cp -fL "$lib" .carry/lib/ ;;
      esac
    done
  done
  strip --strip-debug .carry/bin/* .carry/lib/libmemplan_torch.so 2>/dev/null || true
  du -sh .carry
  exit 0
fi

# The CUDA libraries: the toolkit's, else those of the pip wheels beside PyTorch (cuDNN lives there).
extra=$(python3 - <<'EOF' 2>/dev/null
import importlib, os
dirs = []
for m in ("nvidia.cudnn", "nvidia.cublas", "nvidia.cuda_nvrtc", "nvidia.cuda_runtime", "nvidia.cu13", "nvidia.nccl"):
    try:
        p = importlib.import_module(m).__path__[0]
        for sub in ("lib", "lib64"):
            if os.path.isdir(os.path.join(p, sub)): dirs.append(os.path.join(p, sub))
    except Exception:
        pass
print(":".join(dirs))
EOF
)
export LD_LIBRARY_PATH="$PWD/.carry/lib:/usr/local/cuda/lib64:${extra}:${LD_LIBRARY_PATH:-}"
export MEMPLAN_SOURCE_DIR="$PWD"  # the tests read samples/ from here
T=.carry/bin/test_runtime_allocator
CASES='NVRTC*,tiny models run on the GPU*,one training step on the GPU*,BatchNormTraining and*,AveragePoolGrad*'
CASES+=',ReduceSumTo and ReduceMean over leading axes*,training-mode Dropout draws*,IsNaN*,training steps of mobilenet_v2*,the training steps of resnet50*'
SAN_CASES="${CASES%,the training steps of resnet50*}"  # the sanitizers skip the two full-size training steps
RACE_CASES="${SAN_CASES%,training steps of mobilenet_v2*}"  # racecheck: the op-level tests of the training kernels
ATTN_CASES='FusedAttention on CUDA*,the CUDA attention kernels*'
CASES+=",$ATTN_CASES"  # after the sanitizer sets: `attention` sanitizes one attention case
HALF_CASES='bf16/f16*,one SGD step of a bf16/f16*,generated elementwise kernels over bf16*,the CUDA kernel table declares bf16*'
CASES+=",$HALF_CASES"  # bf16/f16 (docs/cuda.md, "bf16 and fp16")

if [[ "${1:-run}" == test ]]; then  # the GPU tests alone: bench/cuda_bench.sh test [doctest filter]
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  exec "$T" -tc="${2:-$CASES}" -s
fi

OUT_DIR="${2:-bench/results}"
mkdir -p "$OUT_DIR"

workspace() {  # cuDNN workspaces planned in the arena at several caps against one beside it (ResNet-50, batch 32)
  .carry/bin/bench_cuda workspace samples/models/resnet50.dyn.onnx 20 batch=32 > "$OUT_DIR/cuda_workspace_infer.json"
  .carry/bin/bench_cuda workspace samples/models/resnet50.train.onnx 5 batch=32 train=1 optimizer=none \
    > "$OUT_DIR/cuda_workspace_train.json"
}
if [[ "${1:-run}" == nccl ]]; then  # data parallel through NCCL (docs/multi-gpu-run.md): its GPU tests, then
  # `bench/cuda_bench.sh nccl multi` also bench/multi_gpu.py on every visible GPU (torchrun)
  export NCCL_NVLS_ENABLE=0 MEMPLAN_CLI="$PWD/scripts/memplan_carried.sh"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$T" -tc='one-rank NCCL*,a one-rank NCCL*' 2>&1 | tail -30; echo "one-rank NCCL tests: exit ${PIPESTATUS[0]}"
  "$T" -tc='two processes with one GPU each*' -s 2>&1 | tail -30; echo "two-process test: exit ${PIPESTATUS[0]} (77: skipped)"
  if [[ "${2:-}" == multi ]]; then
    python3 -m torch.distributed.run --nproc-per-node "$(nvidia-smi -L | wc -l)" bench/multi_gpu.py --memplan "$MEMPLAN_CLI" ${3:+--out "$3"} "${@:4}"
  fi
  exit
fi
if [[ "${1:-run}" == workspace ]]; then workspace; exit; fi
if [[ "${1:-run}" == attention ]]; then  # FusedAttention(Grad): tests, sanitizers on one case, beside torch SDPA
  "$T" -tc="$ATTN_CASES" 2>&1 | tail -4
  one='FusedAttention on CUDA matches the CPU kernels in both layouts*'
  for tool in memcheck racecheck; do
    timeout "${SANITIZE_SECONDS:-300}" compute-sanitizer --tool "$tool" "$T" -tc="$one" 2>&1 | grep -E 'SUMMARY' | tail -1
  done
  .carry/bin/bench_attention > "$OUT_DIR/cuda_attention.json"
  python3 bench/torch_sdpa_bench.py > "$OUT_DIR/cuda_attention_torch.json"
  python3 - "$OUT_DIR" <<'EOF'
import json, sys
ours, torch = (json.load(open(f"{sys.argv[1]}/{n}")) for n in ("cuda_attention.json", "cuda_attention_torch.json"))
for a, b in zip(ours["results"], torch["results"]):
    print(f"s={a['s']} causal={a['causal']}: forward {a['forward_ms']:.3f} ms vs torch {b['forward_ms']:.3f} ms, "
          f"forward+backward {a['forward_backward_ms']:.3f} ms vs torch {b['forward_backward_ms']:.3f} ms")
EOF
  exit
fi
if [[ "${1:-run}" == yardstick ]]; then  # PyTorch beside memplan's predictions and plans run on this GPU
  python3 bench/pytorch_yardstick.py --memplan .carry/bin/memplan --bench-cuda .carry/bin/bench_cuda --out "$OUT_DIR/yardstick.json"
  python3 bench/yardstick_report.py "$OUT_DIR/yardstick.json" > "$OUT_DIR/yardstick.md"
  exit
fi

LOG="$OUT_DIR/cuda_log.txt"
: > "$LOG"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$LOG"
$T -tc="$CASES" 2>&1 | tee -a "$LOG"; test_rc=${PIPESTATUS[0]}
.carry/bin/bench_cuda tiny samples/models > "$OUT_DIR/cuda_tiny.json" 2>>"$LOG"
.carry/bin/bench_cuda fused $((1 << 30)) > "$OUT_DIR/cuda_fused.json" 2>>"$LOG"
# Training steps: tiny_gpt and a GPT-like transformer (8 layers, d 512, 8 heads, seq 256, batch 16), each
# planned under none/sqrt, and optimal/swap/auto at the activation memory PyTorch's torch.utils.checkpoint
# over sqrt(layers) segments reaches (measured first, same transformer), and run on the GPU.
GPT_ARGS="--layers 8 --d 512 --heads 8 --seq 256 --batch 16 --out-dim 512"
GPT_ONNX="${TMPDIR:-/tmp}/memplan_gpt_l8_d512.onnx"
python3 bench/make_gpt.py "$GPT_ONNX" $GPT_ARGS 2>>"$LOG"
python3 bench/torch_train.py $GPT_ARGS --steps 20 > "$OUT_DIR/cuda_train_torch.json" 2>>"$LOG"
ck=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["checkpoint_sqrt"]["peak_over_persistent_bytes"])' \
  "$OUT_DIR/cuda_train_torch.json" 2>>"$LOG")
.carry/bin/bench_cuda train samples/models/tiny_gpt.onnx 20 > "$OUT_DIR/cuda_train_tiny_gpt.json" 2>>"$LOG"
.carry/bin/bench_cuda train "$GPT_ONNX" 20 ${ck:+activation_budget=$ck} strategies=optimal,swap,auto \
  > "$OUT_DIR/cuda_train_gpt.json" 2>>"$LOG"
# Inference, one kernel per op against fused elementwise groups, beside PyTorch eager and torch.compile:
# tiny_gpt (its own weights) and the GPT above, the same networks in PyTorch (bench/torch_infer.py).
.carry/bin/bench_cuda infer samples/models/tiny_gpt.onnx 200 > "$OUT_DIR/cuda_infer_tiny_gpt.json" 2>>"$LOG"
.carry/bin/bench_cuda infer "$GPT_ONNX" 50 > "$OUT_DIR/cuda_infer_gpt.json" 2>>"$LOG"
(cd bench && python3 torch_infer.py --layers 4 --d 64 --heads 4 --seq 16 --batch 2 --out-dim 64 --runs 200) \
  > "$OUT_DIR/cuda_infer_torch_tiny_gpt.json" 2>>"$LOG"
(cd bench && python3 torch_infer.py $GPT_ARGS --runs 50) > "$OUT_DIR/cuda_infer_torch_gpt.json" 2>>"$LOG"
sanitize() {  # tool, test cases -> number of errors compute-sanitizer reports (empty when it did not finish)
  timeout "${SANITIZE_SECONDS:-200}" compute-sanitizer --tool "$1" "$T" -tc="$2" > "$OUT_DIR/cuda_$1.txt" 2>&1
  # memcheck: "ERROR SUMMARY: N errors"; racecheck: "RACECHECK SUMMARY: ... (N errors, M warnings)"
  grep -oE 'ERROR SUMMARY: [0-9]+|\(([0-9]+) errors' "$OUT_DIR/cuda_$1.txt" | tail -1 | grep -oE '[0-9]+'
}
memcheck=$(sanitize memcheck "$SAN_CASES"); racecheck=$(sanitize racecheck "$RACE_CASES")
workspace 2>>"$LOG"
echo "memcheck errors: $memcheck, racecheck errors: $racecheck" | tee -a "$LOG"

python3 - "$OUT_DIR" "$test_rc" "${memcheck:-null}" "${racecheck:-null}" <<'EOF' | tee -a "$LOG"
import json, subprocess, sys, datetime
out, test_rc, mem, race = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def load(name):
    try:
        return json.load(open(f"{out}/{name}"))
    except Exception as e:
        return {"error": str(e)}
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
fused, tiny = load("cuda_fused.json"), load("cuda_tiny.json")
gpt, tiny_gpt, torch_res = load("cuda_train_gpt.json"), load("cuda_train_tiny_gpt.json"), load("cuda_train_torch.json")
keys = ("peak_device_bytes", "planned_bytes", "step_seconds", "step_overhead_vs_none", "recompute_overhead",
        "library_constant_bytes", "resident_bytes", "workspace_bytes")
strategies = {name: {k: row.get(k) for k in keys} for name, row in gpt.get("strategies", {}).items()}
yardstick = {}
if "eager" in torch_res:
    eager = torch_res["eager"]["step_seconds"]
    for mode in ("eager", "checkpoint_sqrt"):
        r = torch_res[mode]
        yardstick[mode] = {"peak_over_persistent_bytes": r["peak_over_persistent_bytes"], "step_seconds": r["step_seconds"],
                           "step_overhead_vs_eager": r["step_seconds"] / eager - 1.0}
res = {
    "device": gpu,
    "date": datetime.date.today().isoformat(),
    "cuda_tests_exit_code": test_rc,
    "fused_bandwidth_fraction": fused.get("fused_bandwidth_fraction"),
    "fused_bandwidth_fraction_arithmetic": fused.get("fused_bandwidth_fraction_arithmetic"),
    "fused": fused,
    "tiny_max_abs_error": tiny.get("tiny_max_abs_error"),
    "tiny": tiny,
    "sanitizer_errors": {"memcheck": None if mem == "null" else int(mem), "racecheck": None if race == "null" else int(race)},
    "training_model": "GPT-like " + str(gpt.get("graph", "?")) + " (bench/make_gpt.py), Adam, float32 without TF32; optimal, "
                      "swap and auto planned at PyTorch checkpoint's activation memory (budget_bytes)",
    "training_budget_bytes": gpt.get("budget_bytes"),
    "training_strategies": strategies,
    "training_pytorch": yardstick,
    "training": {"gpt": gpt, "tiny_gpt": tiny_gpt, "pytorch": torch_res},
    "inference_vs_pytorch": {},
    "conv_workspace": {"resnet50_inference_b32": load("cuda_workspace_infer.json"),
                       "resnet50_training_b32": load("cuda_workspace_train.json")},
}
for name in ("tiny_gpt", "gpt"):
    ours, theirs = load(f"cuda_infer_{name}.json"), load(f"cuda_infer_torch_{name}.json")
    row = {"ours_unfused_seconds": ours.get("unfused", {}).get("run_seconds"),
           "ours_fused_seconds": ours.get("fused", {}).get("run_seconds"),
           "fused_groups": ours.get("fused", {}).get("fused_groups"),
           "intermediate_bytes_removed": ours.get("fused", {}).get("intermediate_bytes_removed"),
           "arena_bytes_unfused": ours.get("unfused", {}).get("arena_bytes"),
           "arena_bytes_fused": ours.get("fused", {}).get("arena_bytes"),
           "pytorch_eager_seconds": theirs.get("eager", {}).get("run_seconds"),
           "pytorch_compile_seconds": theirs.get("compile", {}).get("run_seconds"),
           "pytorch_eager_peak_bytes": theirs.get("eager", {}).get("peak_over_before_bytes"),
           "pytorch_compile_peak_bytes": theirs.get("compile", {}).get("peak_over_before_bytes")}
    if "error" in theirs.get("compile", {}):
        row["pytorch_compile_error"] = theirs["compile"]["error"]
    res["inference_vs_pytorch"][name] = row
json.dump(res, open(f"{out}/cuda.json", "w"), indent=2)
print(json.dumps({k: res[k] for k in ("device", "fused_bandwidth_fraction", "tiny_max_abs_error", "sanitizer_errors",
                                      "training_strategies", "training_pytorch", "inference_vs_pytorch")}, indent=1))
EOF
