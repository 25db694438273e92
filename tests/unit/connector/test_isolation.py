"""``laminar_kafka.connector`` stands alone: nothing of Kafka, of the connectors, of the runtime or of
the dev tools, read from the source (every import statement, at any depth) and checked in a fresh
interpreter (what importing it really loads); its conformance kit needs only the ``kit`` extra."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CONNECTOR = ROOT / "connector"
#: what the protocol package never imports (the distribution's floors above it, and Kafka's client)
FORBIDDEN_OURS = ("laminar_kafka.kafka_source", "laminar_kafka.redis_source", "laminar_kafka.cluster",
                  "laminar_kafka.devstack", "laminar_kafka.cli", "laminar_kafka.testing")
#: third-party modules the kit must not load: servers, Kafka's client and the [test] extra's heavy parts
FORBIDDEN_LIBRARIES = ("confluent_kafka", "duckdb", "moto", "testcontainers", "docker", "kazoo", "redis", "boto3")


def _imported(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import (the layering scan reads absolute ones)"
            found.add(node.module or "")
    return found


def _offends(module: str) -> bool:
    return module.startswith(FORBIDDEN_OURS) or module.split(".")[0] in FORBIDDEN_LIBRARIES


def test_no_module_of_the_protocol_imports_kafka_the_connectors_the_runtime_or_the_dev_tools() -> None:
    files = sorted(CONNECTOR.rglob("*.py"))
    assert len(files) > 15
    offenders = {f"{path.relative_to(ROOT)}: {module}" for path in files for module in _imported(path) if _offends(module)}
    assert not offenders, sorted(offenders)


def test_the_static_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from laminar_kafka.kafka_source.source import KafkaSource\n    import confluent_kafka\n")
    assert {m for m in _imported(module) if _offends(m)} == {"laminar_kafka.kafka_source.source", "confluent_kafka"}


_LOADED = """
import json, sys
import laminar_kafka.connector, laminar_kafka.connector.conformance, laminar_kafka.connector.memory
from laminar_kafka.connector.conformance import conformance_tests
print(json.dumps(sorted(sys.modules)))
"""


def test_importing_the_protocol_and_its_kit_loads_nothing_forbidden() -> None:
    run = subprocess.run([sys.executable, "-c", _LOADED], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    loaded = json.loads(run.stdout)
    assert "laminar_kafka.connector.conformance.pytest_kit" in loaded and "pytest" in loaded
    assert not [m for m in loaded if _offends(m)]


def test_importing_the_protocol_does_not_import_pytest() -> None:
    code = "import sys, laminar_kafka.connector, laminar_kafka.connector.conformance; print('pytest' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert (run.returncode, run.stdout.strip()) == (0, "False"), run.stderr


def test_the_kit_extra_is_the_kits_test_libraries_and_no_server() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = sorted(requirement.split(">")[0].split("=")[0].split("[")[0] for requirement in extras["kit"])
    assert names == ["hypothesis", "pytest", "pytest-asyncio"]


def test_every_library_the_protocol_and_kit_import_is_a_core_dependency_or_in_the_kit_extra() -> None:
    """The third-party imports of every module under ``connector/``, read from the source."""
    used = {module.split(".")[0] for path in CONNECTOR.rglob("*.py") for module in _imported(path)}
    third_party = {m for m in used if m not in sys.stdlib_module_names and m not in ("laminar_kafka", "__future__")}
    assert "pyarrow" in third_party and "pytest" in third_party
    assert third_party <= {"pyarrow", "xxhash", "numpy", "hypothesis", "pytest", "pytest_asyncio"}, third_party


def test_the_public_surface_resolves_and_states_its_contracts() -> None:
    """Every name of ``laminar_kafka.connector.__all__`` (and of the kit's) exists, and every class
    and function among them has a docstring (the contracts live there)."""
    import inspect

    import laminar_kafka.connector as connector
    import laminar_kafka.connector.conformance as kit

    for module in (connector, kit):
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                assert inspect.getdoc(value), f"{module.__name__}.{name} has no docstring"
    assert {"PartitionedLogSource", "PartitionRead", "CursorFormat", "ConnectorConfig", "TopicPartitionId",
            "SourceCheckpoint", "SourceConnector"} <= set(connector.__all__)
    assert {"ConnectorKit", "LogBackend", "conformance_tests"} <= set(kit.__all__)
