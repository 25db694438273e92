#!/usr/bin/env bash
# The compatibility matrix (docs/compatibility.md), run by `make matrix` (the last step of `make test`):
# the smoke test and a representative part of the source and coordinator integration suites, once per
# cell, and the KafkaSource conformance kit in the oldest-libraries cell. The default cell (Kafka 4.1.1 KRaft, ZooKeeper 3.9.4, Python 3.11, the newest libraries) is
# `make test`'s main pass; the cells here vary the rest, combined to save time:
#
#   kafka39-zookeeper   Kafka 3.9 with ZooKeeper-mode brokers, on ZooKeeper 3.8   (.venv: Python 3.11)
#   kafka39-kraft-py313 Kafka 3.9 in KRaft mode, ZooKeeper 3.9, Python 3.13       (.venv-py313)
#   oldest              the oldest confluent-kafka, pyarrow, kazoo, pyiceberg, numpy that pyproject.toml
#                       allows (.ci/oldest-constraints.txt), Python 3.11, the pinned servers (.venv-oldest)
#
# usage: bash .ci/matrix.sh [CELL...]   (no CELL: all three)
# Environment: PYTHON (a Python 3.11, default python3), PYTHON313 (default pyenv's 3.13.0),
# MATRIX_PYTEST_ARGS (more pytest arguments). Each cell's venv is created on first use and reinstalled
# when pyproject.toml (or the constraints file) is newer than it. Prints each cell's wall time; exits
# non-zero when a cell failed, after running the others.
set -euo pipefail
cd "$(dirname "$0")/.."

KAFKA_39=3.9.1
ZOOKEEPER_38=3.8.4
PYTHON=${PYTHON:-python3}
# a Python 3.13 that runs: $PYTHON313, else pyenv's (the machine image has 3.13.0), else one on PATH
# (a pyenv shim on PATH may not run); nothing here may download an interpreter, Debian bookworm packages none
if [[ -z ${PYTHON313:-} ]]; then
  for candidate in "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.13*/bin/python3.13 "$(command -v python3.13 || true)"; do
    if [[ -n $candidate ]] && "$candidate" --version >/dev/null 2>&1; then
      PYTHON313=$candidate
      break
    fi
  done
fi
PYTHON313=${PYTHON313:-python3.13}
CONSTRAINTS=.ci/oldest-constraints.txt
read -r -a EXTRA_ARGS <<<"${MATRIX_PYTEST_ARGS:-}"
TESTS=(
  tests/integration/test_smoke.py
  tests/integration/kafka_source/test_source_basic.py
  tests/integration/kafka_source/test_drain.py
  tests/integration/coordinator/test_zk_coordinator.py
)
ALL_CELLS=(kafka39-zookeeper kafka39-kraft-py313 oldest)

# ensure_venv DIR PYTHON [CONSTRAINTS]: DIR holds the package with its test extra (under CONSTRAINTS).
ensure_venv() {
  local dir=$1 python=$2 constraints=${3:-}
  local marker=$dir/.installed
  if [[ -f $marker && $marker -nt pyproject.toml && ( -z $constraints || $marker -nt $constraints ) ]]; then
    return 0
  fi
  echo "matrix: installing $dir ($("$python" --version 2>&1)${constraints:+, constraints $constraints})"
  bash .ci/venv.sh "$dir" "$python" $constraints  # with uv: seconds, not minutes
}

# require_python313: pyenv's Python 3.13 (Debian bookworm has no package of it), or one line and exit 1.
require_python313() {
  if [[ ! -x $PYTHON313 ]]; then
    echo "matrix: Python 3.13 not found at $PYTHON313 (install it with pyenv: pyenv install 3.13.0, or set PYTHON313)" >&2
    exit 1
  fi
}

# run_cell NAME VENV [VAR=VALUE...]: resolve the cell's jars, then run the tests with its environment.
run_cell() {
  local name=$1 venv=$2
  shift 2
  echo "matrix: cell $name: ${*:-the pinned servers} on $venv"
  env LAMINAR_MATRIX_CELL="$name" "$@" "$venv/bin/python" -c \
    "from laminar_kafka.devstack.jvm.artifacts import ensure_artifacts; ensure_artifacts()"
  env LAMINAR_MATRIX_CELL="$name" "$@" "$venv/bin/python" -m pytest "${TESTS[@]}" "${CELL_TESTS[@]}" "${EXTRA_ARGS[@]}"
}

cell() {
  # the KafkaSource conformance kit (about a minute; the main pass runs it on the default cell) runs
  # in the cell whose client libraries differ, where a protocol rule is likeliest to break
  CELL_TESTS=()
  case $1 in
    kafka39-zookeeper)
      ensure_venv .venv "$PYTHON"
      run_cell "$1" .venv LAMINAR_KAFKA_VERSION=$KAFKA_39 LAMINAR_KAFKA_MODE=zookeeper \
        LAMINAR_ZOOKEEPER_VERSION=$ZOOKEEPER_38 ;;
    kafka39-kraft-py313)
      require_python313
      ensure_venv .venv-py313 "$PYTHON313"
      run_cell "$1" .venv-py313 LAMINAR_KAFKA_VERSION=$KAFKA_39 LAMINAR_KAFKA_MODE=kraft ;;
    oldest)
      CELL_TESTS=(tests/integration/kafka_source/test_kafka_conformance.py)
      ensure_venv .venv-oldest "$PYTHON" "$CONSTRAINTS"
      run_cell "$1" .venv-oldest ;;
    *)
      echo "matrix: unknown cell '$1' (cells: ${ALL_CELLS[*]})" >&2
      return 2 ;;
  esac
}

cells=("$@")
[[ ${#cells[@]} -gt 0 ]] || cells=("${ALL_CELLS[@]}")
summary=()
failed=0
for name in "${cells[@]}"; do
  started=$SECONDS
  set +e
  (set -e; cell "$name")  # a subshell with errexit of its own: a failed step ends this cell only
  status=$?
  set -e
  if [[ $status -eq 0 ]]; then verdict=passed; else verdict="FAILED (exit $status)"; failed=1; fi
  summary+=("matrix: cell $name $verdict in $((SECONDS - started)) s")
  echo "${summary[-1]}"
done
printf '%s\n' "${summary[@]}"
exit $failed
