#!/usr/bin/env bash
# The Python package's tests (python/tests) against this build: the package from the source tree, the library and
# the CLI from the build directory (CI also runs them after `pip install .` in a fresh environment).
set -u
SRC=${H3S_SOURCE_DIR:?H3S_SOURCE_DIR must name the source tree}
LIB=${H3S_SHARED_LIBRARY:?H3S_SHARED_LIBRARY must name the built libh3strict.so}
PY=${H3S_PYTHON:-/usr/bin/python3}
if ! "$PY" -c "import torch, pytest" >/dev/null 2>&1; then
    echo "SKIP: $PY lacks torch or pytest (Debian: python3-torch python3-pytest)"
    exit 77
fi
cd "$(mktemp -d)" || exit 1
trap 'rm -rf "$PWD"' EXIT
PYTHONPATH="$SRC/python" H3STRICT_LIBRARY="$LIB" "$PY" -m pytest -q -p no:cacheprovider "$SRC/python/tests"
