#!/usr/bin/env bash
# Builds memplan, its tests and the fuzz targets with AddressSanitizer + UndefinedBehaviorSanitizer in build-asan/ and runs them.
# Usage: scripts/test_sanitize.sh [--ci] [ctest args...]   (e.g. -R py_test_hostile)
#   no flag  every target, the whole ctest suite (but the install test).
#   --ci     what CI runs (scripts/test.sh), the part of the suite its optimized build leaves: the libraries, the
#            memplan command, the fuzz targets and the unit tests of the stages that read files (analysis: ONNX and
#            JSON importers, hostile inputs; torch_allocator and viz: traces) and of the other readers (test_readers:
#            plan JSON, .npy, external weights); every Python test against the sanitized memplan but the corpus-wide
#            ones (ctest label python_corpus: honest CLI, plan fingerprints, fusion CLI; 4-5 min each under ASan); then
#            each fuzz target for MEMPLAN_FUZZ_SECONDS (default 45), all at once. The planner and runtime unit tests
#            run in the optimized build only (10-20 times faster there).
# clang -O1 without debug info (stack traces name functions through llvm-symbolizer): the build is the cost. UBSan
# halts on the first report (-fno-sanitize-recover=all); a sanitizer report, leak, crash or hang fails the run. CUDA is
# left out: ASan and the CUDA runtime do not share an address space well, and this build is for logic errors.
set -euo pipefail
cd "$(dirname "$0")/.."
ci=0
if [ "${1:-}" = "--ci" ]; then ci=1; shift; fi
jobs="$(nproc)"
dir=build-asan
lock=(); if [ -e /tmp/memplan-build.lock ]; then lock=(flock /tmp/memplan-build.lock); fi
start=$(date +%s)
stages="analysis;planner;runtime_allocator;torch_allocator;viz;cli"
if [ $ci -eq 1 ]; then stages="analysis;torch_allocator;viz;readers"; fi
"${lock[@]}" cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_FLAGS=-O1 -DCMAKE_CXX_FLAGS=-O1 -DMEMPLAN_SANITIZE=ON -DMEMPLAN_FUZZ=ON -DMEMPLAN_CUDA=OFF \
  -DMEMPLAN_BENCH=OFF -DMEMPLAN_WERROR=ON "-DMEMPLAN_TEST_STAGES=$stages" \
  "-DMEMPLAN_TORCH_PYTHON=${MEMPLAN_TORCH_PYTHON:-python3}" > /dev/null
targets=()
if [ $ci -eq 1 ]; then
  # The command, the unit-test executables of $stages and every fuzz target; not the samples, not the install test.
  mapfile -t targets < <(ninja -C "$dir" -t targets all | sed -nE 's/^(memplan|test_[a-z_]+|fuzz_[a-z_]+): .*_LINKER_.*/\1/p')
  targets=(--target "${targets[@]}")
fi
"${lock[@]}" cmake --build "$dir" -j"$jobs" "${targets[@]}"
built=$(date +%s)
# Graphviz keeps plugin and font caches (fontconfig, glib, pango, cairo) until exit: not ours to free.
# viz/dag_graphviz.cpp releases what it owns (agclose, gvFreeLayout) and keeps one context for the process.
cp fuzz/lsan.supp "$dir/lsan.supp"
# detect_leaks: leaks fail the run; halt_on_error/abort_on_error: the first report kills the process that caused it.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$PWD/$dir/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Not the install test: the installed libraries carry the instrumentation, which a plain consumer cannot link.
skip='install_find_package'
timeout=900
labels=()
if [ $ci -eq 1 ]; then
  # The command over the whole sample corpus (every model, strategy and fusion setting: 4-5 minutes each under ASan):
  # scripts/test.sh runs them in the optimized build; the hostile-input, differential and CLI tests here cover the
  # same readers and planner paths on small inputs.
  labels=(-LE '^python_corpus$')
  timeout=300  # a test past 300 s under ASan hangs: the slowest one CI runs takes under a minute
fi
status=0
ctest --test-dir "$dir" --output-on-failure -j"$jobs" --timeout $timeout -E "^($skip)\$" "${labels[@]}" "$@" || status=$?
tested=$(date +%s)
msg="sanitized build: $((built - start)) s; tests: $((tested - built)) s"
if [ $ci -eq 1 ]; then
  bash scripts/fuzz.sh --build "$dir" --parallel "${MEMPLAN_FUZZ_SECONDS:-45}" || status=1
  msg="$msg; fuzz: $(( $(date +%s) - tested )) s"
fi
echo "$msg"
exit $status
