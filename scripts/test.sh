#!/usr/bin/env bash
# Installs what memplan needs (Debian packages; clang for the sanitizers and libFuzzer; onnx, onnxruntime, numpy as test
# references), then runs every test once, in one of two builds (warnings as errors in both):
# - optimized (gcc -O2, CUDA when the toolkit is found): the libraries, the command, libmemplan_torch, the benchmarks
#   and samples (compiled, not run) and the unit tests of planner/, runtime_allocator/ and torch_allocator/ (GPU tests
#   skip without a GPU); ctest runs those, the install test and the corpus-wide Python tests (label python_corpus);
# - sanitized (scripts/test_sanitize.sh --ci: clang -O1, ASan+UBSan, no CUDA): the unit tests of analysis/, viz/,
#   torch_allocator/ and every file reader's (test_readers), every other Python test (label python) against the
#   sanitized command, and a short run of every fuzz target.
# MEMPLAN_SANITIZE_CI=0 skips the sanitized pass and builds and runs the whole suite in the optimized build instead.
# build/ keeps the stages it was configured with (MEMPLAN_TEST_STAGES, a CMake cache entry): after CI, configure with
# -DMEMPLAN_TEST_STAGES="analysis;planner;runtime_allocator;torch_allocator;viz;cli" to build every unit test again.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
bash scripts/install_deps.sh --test
# PyTorch for memplan_torch's tests (a virtual environment outside the checkout, reused while its pins match)
MEMPLAN_TORCH_PYTHON="$(bash scripts/install_torch_env.sh)"
export MEMPLAN_TORCH_PYTHON
t1=$(date +%s)
# Optimized as RelWithDebInfo but without debug info: a third less compile time, and the tests need no symbols
# (a failure is re-run under gdb or the sanitized build locally).
sanitize="${MEMPLAN_SANITIZE_CI:-1}"
stages="planner;runtime_allocator;torch_allocator"
labels=(-LE '^python$')  # the Python tests but the corpus-wide ones run in the sanitized pass
if [ "$sanitize" = 0 ]; then stages="analysis;planner;runtime_allocator;torch_allocator;viz;cli"; labels=(); fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" -DCMAKE_CUDA_FLAGS_RELEASE="-O2 -DNDEBUG" -DMEMPLAN_WERROR=ON \
  "-DMEMPLAN_TEST_STAGES=$stages" "-DMEMPLAN_TORCH_PYTHON=$MEMPLAN_TORCH_PYTHON" > /dev/null
cmake --build build -j"$(nproc)"
t2=$(date +%s)
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900 "${labels[@]}"
t3=$(date +%s)
if [ "$sanitize" != 0 ]; then bash scripts/test_sanitize.sh --ci; fi
t4=$(date +%s)
echo "test.sh: deps $((t1 - t0)) s; build $((t2 - t1)) s; tests $((t3 - t2)) s; sanitized pass $((t4 - t3)) s;" \
  "total $((t4 - t0)) s"
