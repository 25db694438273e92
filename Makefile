# laminar-kafka: one entry point for people and CI.
#   make test   creates .venv, installs the package with its test extra, fetches the Kafka and
#               ZooKeeper jars from Maven Central (cached), and runs every suite against real servers.
#   make demo   a local 3-node cluster with a live rebalance and a node kill, ending with `verify`.
#   make bench  the benchmarks (JSON on stdout).
#   make chaos  the seeded chaos campaign (SEEDS=20 draws every fault kind; CHAOS_ARGS for more flags).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
SEEDS ?= 20
CHAOS_ARGS ?=

.PHONY: install artifacts test test-unit demo chaos bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test]"
	touch $@

install: $(VENV)/.installed

artifacts: install
	$(PY) -c "from cluster.devstack import ensure_artifacts; print('jvm artifacts:', ensure_artifacts())"

test: artifacts
	$(PY) -m pytest tests/unit tests/integration tests/faults $(PYTEST_ARGS)

test-unit: install
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

demo: artifacts
	$(VENV)/bin/laminar-kafka demo

chaos: artifacts
	$(VENV)/bin/laminar-kafka chaos --seeds $(SEEDS) $(CHAOS_ARGS)

bench: artifacts
	$(PY) bench/bench_source.py
	$(PY) bench/bench_coordinator.py
	$(PY) bench/bench_cluster.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
