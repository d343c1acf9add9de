#!/usr/bin/env bash
# Installs what memplan needs (Debian packages; clang for the sanitizers and libFuzzer; onnx, onnxruntime, numpy as test
# references), builds everything with warnings as errors and runs the whole test suite through ctest, then the
# sanitized pass: the unit and Python tests under ASan+UBSan and a short run of every fuzz target
# (scripts/test_sanitize.sh --ci). MEMPLAN_SANITIZE_CI=0 skips the sanitized pass.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
bash scripts/install_deps.sh --test
t1=$(date +%s)
# Optimized as RelWithDebInfo but without debug info: a third less compile time, and the tests need no symbols
# (a failure is re-run under gdb or the sanitized build locally).
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" -DCMAKE_CUDA_FLAGS_RELEASE="-O2 -DNDEBUG" -DMEMPLAN_WERROR=ON > /dev/null
cmake --build build -j"$(nproc)"
t2=$(date +%s)
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900
t3=$(date +%s)
if [ "${MEMPLAN_SANITIZE_CI:-1}" != 0 ]; then bash scripts/test_sanitize.sh --ci; fi
t4=$(date +%s)
echo "test.sh: deps $((t1 - t0)) s; build $((t2 - t1)) s; tests $((t3 - t2)) s; sanitized pass $((t4 - t3)) s;" \
  "total $((t4 - t0)) s"
