"""The compose file, the Dockerfiles and the image recipes agree with the CLI and with each other
(no engine needed: the container pass runs them for real)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from laminar_kafka.cli.main import build_parser
from laminar_kafka.cluster.config import SETTING_NAMES, env_name, settings_from
from laminar_kafka.devstack.containers import engine as containers
from laminar_kafka.devstack.containers.images import RECIPES, apt_mirrors

DOCKER = Path(__file__).resolve().parents[4] / "docker"
_DEFAULT = re.compile(r"\$\{[A-Z0-9_]+:-([^}]*)\}")


def load() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def default(value: str) -> str:
    """A compose value with every ${VAR:-default} replaced by its default."""
    return _DEFAULT.sub(lambda m: m.group(1), value)


def test_compose_has_zookeeper_kraft_kafka_topic_init_and_three_nodes() -> None:
    services = load()["services"]
    assert {"zookeeper", "kafka", "topic-init", "node1", "node2", "node3"} <= set(services)
    assert "controller" in services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]  # KRaft, no ZooKeeper for Kafka


def test_compose_images_are_the_built_images() -> None:
    services = load()["services"]
    assert default(services["kafka"]["image"]) == containers.KAFKA_IMAGE
    assert default(services["zookeeper"]["image"]) == containers.ZOOKEEPER_IMAGE
    for name in ("topic-init", "node1", "node2", "node3"):
        assert default(services[name]["image"]) == containers.NODE_IMAGE


def test_every_service_has_a_healthcheck_and_the_nodes_wait_for_healthy_servers() -> None:
    """Nodes start once Kafka and ZooKeeper are healthy and the topic exists (podman: healthchecks driven
    by `laminar_kafka.devstack.containers.compose healthchecks`); topic-init, a one-shot, is judged by its exit code."""
    services = load()["services"]
    healthy = {"condition": "service_healthy"}
    for name in ("node1", "node2", "node3"):
        assert services[name]["depends_on"] == {
            "zookeeper": healthy, "kafka": healthy, "topic-init": {"condition": "service_completed_successfully"}}
    assert services["topic-init"]["depends_on"] == {"zookeeper": healthy, "kafka": healthy}
    assert services["topic-init"]["entrypoint"][-1] == "laminar_kafka.devstack.containers.topic_init"
    assert services["topic-init"]["healthcheck"] == {"disable": True}
    for name in ("zookeeper", "kafka", "node1", "node2", "node3"):
        # one shell string: podman's Docker API splits the arguments of the CMD form at whitespace
        assert services[name]["healthcheck"]["test"][0] == "CMD-SHELL" and len(services[name]["healthcheck"]["test"]) == 2, name
    assert "/metrics" in services["node1"]["healthcheck"]["test"][-1]


def test_a_root_dockerignore_matches_the_dockerfile_one() -> None:
    """`docker build .` / compose (context: the repo root) and BuildKit (Dockerfile.dockerignore) send the same files."""
    assert (DOCKER.parent / ".dockerignore").read_text().splitlines()[1:] == \
        (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()[1:]


def test_kafka_advertises_the_published_host_port() -> None:
    kafka = load()["services"]["kafka"]
    advertised = kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    external = re.search(r"EXTERNAL://127\.0\.0\.1:(\$\{[^}]+\})", advertised)
    assert external is not None and "PLAINTEXT://kafka:9092" in advertised
    assert kafka["ports"] == [f"127.0.0.1:{external.group(1)}:19092"]


def test_node_commands_parse_and_env_vars_are_settings() -> None:
    services = load()["services"]
    parser = build_parser()
    known_env = {env_name(name) for name in SETTING_NAMES}
    node_ids = set()
    for name in ("node1", "node2", "node3"):
        service = services[name]
        args = parser.parse_args(service["command"])  # raises UsageError on a wrong flag
        assert args.command == "run"
        env = {k: str(v) for k, v in service["environment"].items()}
        assert set(env) <= known_env, set(env) - known_env
        flags = {n: getattr(args, n.replace("-", "_")) for n in SETTING_NAMES}
        settings = settings_from({}, env, flags)  # the merged settings validate
        assert not settings.embedded and settings.metrics_port == 9100
        node_ids.add(settings.node_id)
        assert service["volumes"] == ["output:/data"] and settings.output.startswith("/data/")
        assert service["stop_signal"] == "SIGTERM"
        assert default(service["ports"][0]).startswith("127.0.0.1:910")
    assert node_ids == {1, 2, 3}


def test_dockerfile_takes_a_base_defaulting_to_python_slim_and_runs_the_console_script() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    assert text.startswith("#") and "ARG BASE=python:3.11-slim" in text and "FROM ${BASE}" in text
    assert "pip install --no-cache-dir --no-deps ." in text
    assert 'ENTRYPOINT ["laminar-kafka"]' in text
    for package in ("kafka_source", "coordinator", "cluster"):
        assert f"COPY {package} ./{package}" in text


@pytest.mark.parametrize("recipe", [r for r in RECIPES if r.dockerfile], ids=lambda r: r.key)
def test_every_recipe_builds_on_its_parent_and_its_context_exists(recipe) -> None:
    text = recipe.dockerfile.read_text()
    assert re.search(r"^ARG BASE=\S+$", text, re.MULTILINE) and "FROM ${BASE}" in text
    if recipe.key not in ("jvm-servers", "rest-catalog"):  # their contexts resolve jars (Maven): the container pass
        for name, source in recipe.context().items():
            assert source.exists(), (recipe.key, name)
            if name.endswith(".sh"):
                assert f"COPY {name}" in text and source.stat().st_mode & 0o111


def test_apt_mirrors_follow_the_hosts_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAMINAR_DEBIAN_MIRROR", raising=False)
    (tmp_path / "etc/apt/sources.list.d").mkdir(parents=True)
    (tmp_path / "etc/apt/sources.list.d/debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\nTypes: deb\nURIs: http://mirror.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n"
    )
    (tmp_path / "etc/apt/sources.list.d/other.list").write_text("deb [arch=amd64] https://other.example/apt stable main\n")
    assert apt_mirrors(tmp_path) == ("http://mirror.example/debian", "http://mirror.example/debian-security")
    (tmp_path / "etc/apt/sources.list.d/debian.sources").unlink()
    (tmp_path / "etc/apt/sources.list").write_text("deb http://one.example/debian/ bookworm main\n")
    assert apt_mirrors(tmp_path) == ("http://one.example/debian", None)
    monkeypatch.setenv("LAMINAR_DEBIAN_MIRROR", "http://override.example/debian")
    assert apt_mirrors(tmp_path)[0] == "http://override.example/debian"


def test_engine_errors_become_one_line_hints() -> None:
    error = RuntimeError("runc create failed: error setting rlimits for ready process: error setting rlimit "
                         "type 6: operation not permitted\nmore detail")
    hint = containers._hint(error)
    assert "\n" not in hint and "containers.conf" in hint and "default_ulimits" in hint
    assert "cannot run" in containers._hint(RuntimeError("something else entirely"))


def test_dev_up_has_a_container_variant() -> None:
    args = build_parser().parse_args(["dev", "up", "--containers"])
    assert args.containers and args.dev_command == "up"
    assert build_parser().parse_args(["dev", "down", "--containers"]).containers
