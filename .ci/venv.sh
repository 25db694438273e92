#!/usr/bin/env bash
# Makes a virtual environment holding this checkout (editable) with its test extra, for CI (.ci/run)
# and the compatibility matrix (.ci/matrix.sh): what `make install` does with pip, done with uv, whose
# parallel downloads and resolver install the extra in about 25 s where pip takes about 85 s (no
# cache, 2 cores). The package set is the same (same resolution rules, same constraints); pip stays
# the documented path for people (README, docs/development.md) and is in the environment as with
# `make install` (upgraded to the newest, as the Makefile does).
#
# usage: bash .ci/venv.sh DIR PYTHON [CONSTRAINTS]
#   DIR          the virtual environment (created with PYTHON's venv module; reused when it exists)
#   PYTHON       the interpreter
#   CONSTRAINTS  a pip constraints file every install obeys (the oldest-libraries cell's)
# uv itself (pinned: a new release never changes CI unasked) is installed with pip, once, into its
# own environment under $LAMINAR_CACHE_DIR/tools (default ~/.cache/laminar-kafka/tools).
# Touches DIR/.installed when done, the marker the Makefile and .ci/matrix.sh check.
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.13.9
dir=$1 python=$2 constraints=${3:-}
tools=${LAMINAR_CACHE_DIR:-$HOME/.cache/laminar-kafka}/tools
uv=$tools/uv-$UV_VERSION/bin/uv

if [[ ! -x $uv ]]; then
  echo "venv.sh: installing uv $UV_VERSION (once; cached in $tools/uv-$UV_VERSION)" >&2
  mkdir -p "$tools"
  python3 -m venv "$tools/uv-$UV_VERSION"
  "$tools/uv-$UV_VERSION/bin/python" -m pip install -q "uv==$UV_VERSION"
fi

"$python" -m venv "$dir"
# --compile-bytecode: the .pyc files pip writes at install too (uv leaves them out by default); without
# them every process the tests start compiles its imports again where PYTHONDONTWRITEBYTECODE is set
"$uv" pip install -q --compile-bytecode --python "$dir/bin/python" ${constraints:+--constraint "$constraints"} --upgrade pip
"$uv" pip install -q --compile-bytecode --python "$dir/bin/python" ${constraints:+--constraint "$constraints"} -e ".[test]"
touch "$dir/.installed"
