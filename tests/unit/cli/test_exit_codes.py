"""The one table from an error to the command line's exit code, and main() applying it to every
subcommand (no servers)."""
from __future__ import annotations

import argparse

import pytest

import laminar_kafka.cli.main as cli
from laminar_kafka.cli.exit_codes import EXIT_CODES, FAILURE, INTERRUPTED, USAGE, exit_code
from laminar_kafka.cluster.errors import ClusterError, RuntimeFailure, SinkError, UsageError, VerifyError
from laminar_kafka.cluster.lake.parquet.tree_lock import CompactionRunning
from laminar_kafka.connector.errors import ConnectorError, FatalError, TransientError
from laminar_kafka.coordinator.errors import AccessDeniedError, CoordinatorError, FencedError
from laminar_kafka.coordinator.local.state_lock import StateDirectoryInUse
from laminar_kafka.devstack.errors import DevStackError, WaitTimeout
from laminar_kafka.errors import ConfigurationError, LaminarError
from laminar_kafka.kafka_source.schema_registry.proto_text import ProtoTextError
from laminar_kafka.redis_source.errors import RedisConfigError, RedisUnavailable
from laminar_kafka.testing.servers import ServersUnavailable

CODES: list[tuple[BaseException, int | None]] = [
    (UsageError("--wait must be >= 0"), USAGE),
    (CompactionRunning("another compaction holds the tree"), USAGE),
    (ConfigurationError("batch-wait-ms must be >= 0"), USAGE),
    (AccessDeniedError("ZooKeeper denied access to /laminar/p"), USAGE),
    (StateDirectoryInUse("state directory /s is in use"), USAGE),
    (RedisConfigError("stream is required"), USAGE),
    (LaminarError("anything of ours"), FAILURE),
    (ClusterError("cluster"), FAILURE),
    (RuntimeFailure("source failed"), FAILURE),
    (SinkError("cannot publish"), FAILURE),
    (VerifyError("cannot read the output"), FAILURE),
    (CoordinatorError("unreachable"), FAILURE),
    (FencedError("fenced"), FAILURE),
    (ConnectorError("connector"), FAILURE),
    (FatalError("fatal"), FAILURE),
    (TransientError("transient"), FAILURE),
    (RedisUnavailable("redis down"), FAILURE),
    (DevStackError("no java"), FAILURE),
    (WaitTimeout("gave up"), FAILURE),
    (ServersUnavailable("no images"), FAILURE),
    (ProtoTextError("not proto"), FAILURE),
    (KeyboardInterrupt(), INTERRUPTED),
    (ValueError("a bug"), None),
    (RuntimeError("a bug"), None),
    (SystemExit(0), None),
]


@pytest.mark.parametrize("error, code", CODES, ids=[type(e).__name__ for e, _ in CODES])
def test_each_error_class_has_its_code(error: BaseException, code: int | None) -> None:
    assert exit_code(error) == code


def test_the_table_lists_the_most_specific_class_first() -> None:
    """A class must come before every class it derives from, or it could never be reached."""
    kinds = [kind for kind, _ in EXIT_CODES]
    for index, kind in enumerate(kinds):
        assert not any(issubclass(kind, earlier) for earlier in kinds[:index]), kind


def _failing_command(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    """Every subcommand dispatches through ``args.handler``: one that raises ``error``."""
    def handler(args: argparse.Namespace) -> int:
        raise error

    class Parser:
        def parse_args(self, argv: list[str]) -> argparse.Namespace:
            return argparse.Namespace(handler=handler)

    monkeypatch.setattr(cli, "build_parser", Parser)


@pytest.mark.parametrize("error, code", [(e, c) for e, c in CODES if c not in (None, INTERRUPTED)],
                         ids=[type(e).__name__ for e, c in CODES if c not in (None, INTERRUPTED)])
def test_main_prints_one_line_and_returns_the_code(error: BaseException, code: int, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _failing_command(monkeypatch, error)
    assert cli.main(["any"]) == code
    out, err = capsys.readouterr()
    assert out == "" and err == f"error: {error}\n"


def test_main_is_quiet_on_an_interrupt(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _failing_command(monkeypatch, KeyboardInterrupt())
    assert cli.main(["any"]) == INTERRUPTED
    assert capsys.readouterr() == ("", "")


def test_main_reraises_what_is_not_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    _failing_command(monkeypatch, ZeroDivisionError("a bug"))
    with pytest.raises(ZeroDivisionError):
        cli.main(["any"])


def test_a_configuration_error_from_the_coordinator_is_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """``status`` parses zk-auth with the coordinator's parser: its error is the one class, exit 2,
    before anything is reached."""
    monkeypatch.setenv("LAMINAR_ZK_AUTH", "no-colon")
    assert cli.main(["status", "--zk", "127.0.0.1:1", "--bootstrap", "127.0.0.1:1"]) == USAGE
    assert capsys.readouterr().err == "error: ZooKeeper credentials must be given as user:password\n"
