# Shared by scripts/calibrate and scripts/test: make ./.venv with python3 and install calib into it
# with the extras named in $CALIB_EXTRAS, plus the CuPy wheel matching the driver's CUDA major
# version where an NVIDIA driver answers.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
extras=$CALIB_EXTRAS
if command -v nvidia-smi >/dev/null 2>&1; then
  cuda_major=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\).*/\1/p' | head -n 1)
  case "$cuda_major" in
    12) extras="$extras,cuda12" ;;
    13|14) extras="$extras,cuda13" ;;
  esac
fi
stamp=".venv/.calib-installed-$(echo "$extras" | tr ',' '-')"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setting up .venv with calib[$extras] (log: .venv/install.log) ..." >&2
  if ! { .venv/bin/python -m pip install --upgrade pip && .venv/bin/python -m pip install -e ".[$extras]"; } \
      > .venv/install.log 2>&1; then
    tail -n 30 .venv/install.log >&2
    echo "installing calib[$extras] failed; the whole log is in .venv/install.log" >&2
    exit 1
  fi
  touch "$stamp"
fi
