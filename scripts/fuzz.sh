#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) and runs each for SECONDS (default 30).
# Usage: scripts/fuzz.sh [--build DIR] [--parallel] [SECONDS] [TARGET...]   (targets: fuzz_onnx fuzz_json fuzz_plan
#   fuzz_npy fuzz_cli; default all)
#   --build DIR  use the sanitized build in DIR (scripts/test_sanitize.sh's build-asan, -O1); by default build-fuzz/ is
#                configured here (-O2 with debug info: faster executions and line numbers for long runs).
#   --parallel   run the targets at once (CI: three single-threaded fuzzers share the cores) instead of one by one.
# Exit status: 0 when no target found a crash, sanitizer report, leak, timeout (an input over 10 s) or OOM; 1 otherwise.
# Reproducers land in DIR/artifacts/; the grown corpora stay in DIR/corpus/ and seed the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-fuzz
parallel=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) dir="$2"; shift 2 ;;
    --parallel) parallel=1; shift ;;
    *) break ;;
  esac
done
secs="${1:-30}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=()
  for f in fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
lock=(); if [ -e /tmp/memplan-build.lock ] || touch /tmp/memplan-build.lock 2>/dev/null; then lock=(flock /tmp/memplan-build.lock); fi

if [ ! -f "$dir/build.ninja" ]; then
  [ "$dir" = build-fuzz ] || { echo "fuzz.sh: $dir is not configured (run scripts/test_sanitize.sh)" >&2; exit 2; }
  "${lock[@]}" cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DMEMPLAN_SANITIZE=ON -DMEMPLAN_FUZZ=ON \
    -DMEMPLAN_TESTS=OFF -DMEMPLAN_BENCH=OFF -DMEMPLAN_CUDA=OFF -DMEMPLAN_WERROR=ON > /dev/null
fi
"${lock[@]}" cmake --build "$dir" --target "${targets[@]}" -j"$(nproc)"
# Absolute from here on: fuzz_cli changes its working directory while a command line runs.
dir="$(cd "$dir" && pwd)"

# Seeds: the sample models for ONNX (small ones: large inputs slow every mutation), hand-written JSON.
seed_dir() {
  case "$1" in
    fuzz_onnx) echo "samples/models" ;;
    *) echo "fuzz/seeds/${1#fuzz_}" ;;
  esac
}
mkdir -p "$dir/artifacts"
# Graphviz's plugin and font caches live until exit (fuzz_cli draws DAGs): not ours to free.
export LSAN_OPTIONS="suppressions=$PWD/fuzz/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# Runs one target; its output goes to DIR/TARGET.log.
fuzz_one() {
  local t="$1" corpus="$dir/corpus/$1" seeds extra=() opts
  mkdir -p "$corpus"
  seeds="$(seed_dir "$t")"
  opts=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$dir/artifacts/$t-")
  case "$t" in
    fuzz_onnx) opts+=(-max_len=262144) ;;
    fuzz_plan) opts+=(-max_len=131072 -dict=fuzz/json.dict) ;;
    fuzz_npy) opts+=(-max_len=4096) ;;
    fuzz_cli) opts+=(-max_len=512 -dict=fuzz/cli.dict) ;;
    *) opts+=(-max_len=16384 -dict=fuzz/json.dict) ;;
  esac
  if [ "$t" = fuzz_onnx ]; then
    # Models up to 256 KiB; the large training exports would only slow every mutation.
    mkdir -p "$dir/seeds/onnx"
    find "$seeds" -name '*.onnx' -size -256k -exec cp -f {} "$dir/seeds/onnx/" \;
    extra=("$dir/seeds/onnx")
  elif [ -d "$seeds" ]; then
    extra=("$seeds")
  fi
  echo "== $t: ${secs}s, corpus $corpus, seeds ${extra[*]:-none}"
  # The outer timeout catches a fuzzer that stops honouring -max_total_time (a hang outside one input).
  timeout -k 10 $((secs + 120)) "$dir/$t" "${opts[@]}" "$corpus" "${extra[@]}" > "$dir/$t.log" 2>&1
}
report() {
  local t="$1" rc="$2"
  if [ "$rc" -eq 0 ]; then echo "   $t: no crash"; else echo "   $t: FAILED, exit $rc (see $dir/$t.log and $dir/artifacts/)"; fi
  grep -E '^#[0-9]+[[:space:]]+DONE|^Done [0-9]+ runs|SUMMARY|ERROR|runtime error|fuzz invariant' \
    "$dir/$t.log" | head -20 | sed 's/^/   /' || true
}
status=0
if [ $parallel -eq 1 ]; then
  pids=()
  for t in "${targets[@]}"; do fuzz_one "$t" & pids+=($!); done
  for i in "${!targets[@]}"; do
    rc=0; wait "${pids[$i]}" || rc=$?
    report "${targets[$i]}" "$rc"
    [ "$rc" -eq 0 ] || status=1
  done
else
  for t in "${targets[@]}"; do
    rc=0; fuzz_one "$t" || rc=$?
    report "$t" "$rc"
    [ "$rc" -eq 0 ] || status=1
  done
fi
exit $status
