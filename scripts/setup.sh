#!/usr/bin/env bash
# Set up vprof on a fresh machine: a virtual environment with vprof, its test tools and a
# vLLM build (the CPU build by default; VPROF_ENGINE=gpu installs PyPI's vllm instead).
# Re-running it reuses the environment and only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VPROF_VENV:-.venv}
ENGINE=${VPROF_ENGINE:-cpu}
PYTHON=${PYTHON:-python3.11}

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
# The CPU build needs torch==2.13.0+cpu: these machines find it through pip's configured
# find-links; elsewhere set PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu first.
"$VENV/bin/pip" install --quiet -e ".[$ENGINE,dev]"
if [ "$ENGINE" = cpu ]; then
  # PyPI's torchvision/torchaudio/torchcodec are built against another torch and make
  # `import vllm` fail ("operator torchvision::nms does not exist"); the server needs none.
  "$VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
# Headless Chromium for the web-UI test (Debian's package; browser downloads fail here).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null) \
    || echo "setup: could not install chromium; the web-UI test will be skipped" >&2
fi
"$VENV/bin/vprof" --version
