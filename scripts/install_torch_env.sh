#!/usr/bin/env bash
# The Python environment of memplan_torch's tests and benches: PyTorch and the model libraries the zoo is built
# from, pinned to the versions the GPU measurements in bench/results were made with (PyTorch 2.11 on the H100/H200
# machines). A virtual environment outside the checkout, made once and reused while its pins match:
# $MEMPLAN_TORCH_VENV, default ~/.cache/memplan/torch-venv (about 5.5 GB; a few minutes to make). Prints its python.
set -euo pipefail
venv="${MEMPLAN_TORCH_VENV:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/memplan/torch-venv}"
pins=(torch==2.11.0 torchvision==0.26.0 transformers==5.17.0 timm==1.0.31 numpy onnx onnxruntime lizard==1.24.3)
stamp="$venv/.memplan-pins"
want="${pins[*]}"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q "${pins[@]}" >&2
  echo "$want" > "$stamp"
fi
echo "$venv/bin/python"
