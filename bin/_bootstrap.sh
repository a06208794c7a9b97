# Sourced by bin/tessera and bin/test: installs everything the project needs, from nothing but
# python3 (>= 3.11) and the network to PyPI. Idempotent and quick when already done.
set -euo pipefail
TESSERA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export TESSERA_ROOT
UV_VERSION=0.13.9
tools="$TESSERA_ROOT/.tools"
if [ ! -x "$tools/bin/uv" ] || [ "$("$tools/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" != "$UV_VERSION" ]; then
  python3 -m venv "$tools" >&2
  "$tools/bin/python" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION" >&2
fi
export UV_PROJECT_ENVIRONMENT="$TESSERA_ROOT/.venv"
export UV_PYTHON_PREFERENCE=only-system
"$tools/bin/uv" sync --quiet --frozen --all-packages --project "$TESSERA_ROOT" >&2
export PATH="$TESSERA_ROOT/.venv/bin:$PATH"
