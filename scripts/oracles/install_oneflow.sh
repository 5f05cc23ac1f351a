#!/usr/bin/env bash
# The OneFlow oracle (issue 44): OneFlow 0.9.0 installs only on Python 3.10 (its cp310 wheel,
# built against numpy 1), and its shared libraries need these cuDNN and cuBLAS wheels.  It
# goes into its own virtual environment, .oracles/oneflow (git-ignored), which
# tests/test_promotion_live.py runs scripts/oracles/oneflow_table.py with.  Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=.oracles/oneflow
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import oneflow" 2>/dev/null; then
    exit 0
fi
# (python3.10 on PATH, else a pyenv installation of it: pyenv's shim fails where 3.10 is
# not a selected version)
python=""
for candidate in python3.10 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.10*/bin/python3.10; do
    if "$candidate" -c "import sys; assert sys.version_info[:2] == (3, 10)" 2>/dev/null; then
        python=$candidate
        break
    fi
done
if [ -z "$python" ]; then
    echo "install_oneflow.sh: python3.10 not found (OneFlow 0.9.0 has wheels for 3.10 only)" >&2
    exit 1
fi
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet oneflow==0.9.0 "numpy<2" \
    nvidia-cudnn-cu11==8.5.0.96 nvidia-cublas-cu11==11.10.3.66
