"""`dev up`, `dev status`, `dev down` against real processes, through the CLI's own handlers."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from laminar_kafka.cli.dev import add_dev_commands
from laminar_kafka.devstack.processes import pid_alive, terminate_pid
from laminar_kafka.devstack.stack import read_state

pytestmark = pytest.mark.integration


def _run(state_file: Path, *argv: str) -> int:
    parser = argparse.ArgumentParser(prog="laminar-kafka")
    add_dev_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["dev", "--state-file", str(state_file), *argv])
    return int(args.handler(args))


def test_dev_up_status_down_leaves_no_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state_file = tmp_path / "state.json"
    assert _run(state_file, "up") == 0
    printed = capsys.readouterr().out
    assert "bootstrap.servers" in printed and "zookeeper" in printed and "started in" in printed
    recorded = read_state(state_file)
    assert recorded is not None and recorded.healthy
    pids = [p.pid for p in recorded.processes]
    try:
        assert _run(state_file, "up") == 0
        assert "already running" in capsys.readouterr().err  # notes go to stderr: --json output stays JSON
        assert _run(state_file, "status") == 0
        # A crash of one server makes the recording stale: status says so, up cleans and restarts.
        terminate_pid(pids[-1], timeout=0)
        assert _run(state_file, "status") == 1
        assert _run(state_file, "up") == 0
        assert "stale state file" in capsys.readouterr().err
        recorded = read_state(state_file)
        assert recorded is not None and recorded.healthy
        pids += [p.pid for p in recorded.processes]
    finally:
        assert _run(state_file, "down") == 0
    assert not state_file.exists()
    assert not any(pid_alive(pid) for pid in pids)
    assert _run(state_file, "status") == 3


def test_dev_up_secure_prints_the_client_settings_but_never_the_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import stat
    import tomllib

    from laminar_kafka.kafka_source.clients import KafkaClientConfig, make_admin

    state_file = tmp_path / "state.json"
    assert _run(state_file, "up", "--secure") == 0
    printed = capsys.readouterr().out
    recorded = read_state(state_file)
    assert recorded is not None and recorded.secure is not None
    config = Path(recorded.secure["client_config"])
    try:
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
        document = tomllib.loads(config.read_text())
        password = document["kafka"]["sasl.password"]
        secrets = [password, tomllib.loads(Path(recorded.secure["mtls_client_config"]).read_text())["kafka"]["ssl.key.password"]]
        assert str(config) in printed and recorded.secure["sasl_ssl_bootstrap"] in printed
        # the screen shows a ready [kafka] table: the file's settings but the password
        shown = tomllib.loads(printed.split("--config", 1)[1].split("\n", 1)[1])
        assert shown["bootstrap"] == document["bootstrap"] == recorded.secure["sasl_ssl_bootstrap"]
        assert shown["kafka"] == {k: v for k, v in document["kafka"].items() if k != "sasl.password"}
        assert shown["kafka"]["security.protocol"] == "SASL_SSL" and shown["kafka"]["sasl.mechanism"] == "SCRAM-SHA-512"
        # the file works as written
        for written in (config, Path(recorded.secure["mtls_client_config"])):
            values = tomllib.loads(written.read_text())
            metadata = make_admin(KafkaClientConfig(values["bootstrap"], values["kafka"])).list_topics(timeout=20)
            assert len(metadata.brokers) == 1
        assert _run(state_file, "status") == 0
        assert _run(state_file, "up", "--secure") == 0
        assert _run(state_file, "status", "--json") == 0
        captured = capsys.readouterr()
        again = captured.out + captured.err
        assert "already running" in captured.err and recorded.secure["ssl_bootstrap"] in captured.out
        for text in (printed, again, state_file.read_text()):
            assert not any(secret in text for secret in secrets)
    finally:
        assert _run(state_file, "down") == 0
    assert not config.exists()


def test_dev_up_s3_serves_a_bucket_and_a_catalog_and_down_stops_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from pyiceberg.catalog.rest import RestCatalog

    from laminar_kafka.devstack.objectstore.seaweedfs import DEV_BUCKET, recorded_dev_server

    state_file = tmp_path / "state.json"
    assert _run(state_file, "up", "--s3") == 0
    printed = capsys.readouterr().out
    server = recorded_dev_server(state_file)
    try:
        assert server is not None and server.running()
        lines = printed.splitlines()
        assert f"export AWS_ENDPOINT_URL={server.endpoint}" in lines and DEV_BUCKET in printed
        assert any("catalog" in line and server.catalog_uri in line and line.startswith("#") for line in lines)
        fs, root = server.access.filesystem(), f"{DEV_BUCKET}/probe"  # SeaweedFS checks signatures
        with fs.open_output_stream(f"{root}/x.txt") as stream:
            stream.write(b"ok")
        assert fs.get_file_info(f"{root}/x.txt").size == 2
        # the catalog answers with the printed properties
        catalog = RestCatalog("dev", uri=server.catalog_uri, **server.catalog_properties(),
                              **{"s3.endpoint": server.endpoint, "s3.region": server.region})
        catalog.create_namespace_if_not_exists("probe")
        assert ("probe",) in catalog.list_namespaces()
        assert _run(state_file, "status") == 0
        assert f"port {server.port}" in capsys.readouterr().out
        # up again: the same server, everything in one JSON document
        assert _run(state_file, "up", "--s3", "--json") == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["already_running"] and shown["s3"]["catalog_uri"] == server.catalog_uri
        assert shown["s3"]["env"]["AWS_ENDPOINT_URL"] == server.endpoint and shown["s3"]["pid"] == server.pid
        assert _run(state_file, "status", "--json") == 0
        assert json.loads(capsys.readouterr().out)["s3"]["running"]
    finally:
        assert _run(state_file, "down") == 0
    assert "s3 (SeaweedFS)" in capsys.readouterr().out
    assert server is not None and not pid_alive(server.pid)
    assert recorded_dev_server(state_file) is None
    assert not server.workdir.exists()
    assert not any(socket.exists() for socket in server.ports.grpc_sockets())
