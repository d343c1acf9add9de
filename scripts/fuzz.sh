#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) in build-fuzz/ and runs each for SECONDS (default 30).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (targets: fuzz_onnx fuzz_json fuzz_plan; default all)
# Exit status: 0 when no target found a crash, leak, timeout or OOM; 1 otherwise. Reproducers land in
# build-fuzz/artifacts/; the grown corpora stay in build-fuzz/corpus/ and seed the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-30}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=()
  for f in fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
lock=(); if [ -e /tmp/memplan-build.lock ] || touch /tmp/memplan-build.lock 2>/dev/null; then lock=(flock /tmp/memplan-build.lock); fi

san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f build-fuzz/build.ninja ]; then
  "${lock[@]}" cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS="$san" -DCMAKE_C_FLAGS="$san" \
    -DMEMPLAN_FUZZ=ON -DMEMPLAN_TESTS=OFF -DMEMPLAN_BENCH=OFF -DMEMPLAN_CUDA=OFF -DMEMPLAN_WERROR=ON > /dev/null
fi
"${lock[@]}" cmake --build build-fuzz --target "${targets[@]}" -j2

# Seeds: the sample models for ONNX (small ones: large inputs slow every mutation), hand-written JSON.
seed_dir() {
  case "$1" in
    fuzz_onnx) echo "samples/models" ;;
    *) echo "fuzz/seeds/${1#fuzz_}" ;;
  esac
}
status=0
mkdir -p build-fuzz/artifacts
for t in "${targets[@]}"; do
  corpus="build-fuzz/corpus/$t"
  mkdir -p "$corpus"
  seeds="$(seed_dir "$t")"
  opts=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="build-fuzz/artifacts/$t-")
  case "$t" in
    fuzz_onnx) opts+=(-max_len=262144) ;;
    fuzz_plan) opts+=(-max_len=131072 -dict=fuzz/json.dict) ;;
    *) opts+=(-max_len=16384 -dict=fuzz/json.dict) ;;
  esac
  extra=()
  if [ "$t" = fuzz_onnx ]; then
    # Models up to 256 KiB; the large training exports would only slow every mutation.
    mkdir -p build-fuzz/seeds/onnx
    find "$seeds" -name '*.onnx' -size -256k -exec cp -f {} build-fuzz/seeds/onnx/ \;
    extra=(build-fuzz/seeds/onnx)
  elif [ -d "$seeds" ]; then
    extra=("$seeds")
  fi
  echo "== $t: ${secs}s, corpus $corpus, seeds ${extra[*]:-none}"
  log="build-fuzz/$t.log"
  if ./build-fuzz/"$t" "${opts[@]}" "$corpus" "${extra[@]}" > "$log" 2>&1; then
    echo "   no crash"
  else
    echo "   FAILED (see $log and build-fuzz/artifacts/)"
    status=1
  fi
  grep -E '^#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb|SUMMARY|ERROR' "$log" | sed 's/^/   /' || true
done
exit $status
