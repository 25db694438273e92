"""CLI parsing and bad input: exit 2 with one line, no stack trace, nothing written (no servers)."""
from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from laminar_kafka.cli.main import build_parser, main
from laminar_kafka.cluster.config import SETTING_NAMES
from laminar_kafka.cluster.settings_def import NODE_SETTINGS
from laminar_kafka.kafka_source.config.source_config import Format


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", ["run", "status", "verify", "demo", "dev"])
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: laminar-kafka" in capsys.readouterr().out


def test_run_flags_cover_every_setting() -> None:
    parser = build_parser()
    values = {name: (NODE_SETTINGS[name].choices or ("1",))[-1] for name in SETTING_NAMES}
    args = parser.parse_args(["run", *[f"--{name}={value}" for name, value in values.items()]])
    for name in SETTING_NAMES:
        assert getattr(args, name.replace("-", "_")) == values[name]


@pytest.mark.parametrize("argv, fragment", [
    (["frobnicate"], "invalid choice"),
    (["run", "--no-such-flag"], "unrecognized arguments"),
    (["verify", "--output", "x"], "required"),
    (["run", "--bootstrap", "k:1", "--topic", "t", "--output", "/tmp/x", "--node-id", "zero"], "not an integer"),
    (["run", "--bootstrap", "k:1", "--topic", "t"], "output is required"),
    # an empty --zk (an unset variable in a script) was a traceback from the coordinator
    (["redis", "run", "--node-id", "1", "--zk", "", "--pipeline", "p", "--redis-url", "redis://127.0.0.1:1/0",
      "--stream", "s", "--partitions", "1", "--output", "/tmp/x"], "--zk is empty"),
])
def test_bad_input_is_one_line_exit_2(argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and fragment in err and "Traceback" not in err


def test_unreachable_broker_is_exit_2_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "out"
    code, _, err = run_cli(
        capsys, "run", "--bootstrap", f"127.0.0.1:{closed_port()}", "--topic", "t", "--output", str(output),
        "--connect-timeout", "0.5",
    )
    assert code == 2 and "cannot reach Kafka" in err and err.count("\n") == 1
    assert not output.exists()


def test_verify_unreachable_broker_and_missing_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "verify", "--output", str(tmp_path / "nope"), "--bootstrap", "127.0.0.1:1", "--topic", "t")
    assert code == 2 and "is not a directory" in err
    code, _, err = run_cli(capsys, "verify", "--output", str(tmp_path), "--bootstrap",
                           f"127.0.0.1:{closed_port()}", "--topic", "t", "--timeout", "0.5")
    assert code == 2 and "cannot reach Kafka" in err


def test_bad_config_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    path.write_text('bootstrap = "k:1"\ntopik = "t"\n')
    code, _, err = run_cli(capsys, "run", "--config", str(path))
    assert code == 2 and "did you mean 'topic'" in err


def test_debug_prints_the_stack_trace(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "--debug", "run", "--bootstrap", "k:1", "--topic", "t")
    assert code == 2 and "Traceback" in err


def test_console_module_entry_point() -> None:
    result = subprocess.run([sys.executable, "-m", "laminar_kafka.cli.main", "verify"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.strip().startswith("error:")


def test_sigterm_before_the_node_joined_exits_0(tmp_path: Path) -> None:
    """Chaos seed 45: a node told to leave within a second of its start died of the signal (-15).
    The signal comes once the node is inside the preflight (its debug line says so): Kafka at
    127.0.0.1:9 never answers, so it would wait there for the 30 s of --connect-timeout."""
    import signal
    import subprocess
    import sys

    node = subprocess.Popen(
        [sys.executable, "-m", "laminar_kafka.cli.main", "run", "--bootstrap", "127.0.0.1:9", "--topic", "t",
         "--output", str(tmp_path / "out"), "--connect-timeout", "30", "--log-level", "debug"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        assert node.stdout is not None
        seen: list[str] = []
        for line in node.stdout:  # ends at the latest when the preflight gives up (--connect-timeout)
            seen.append(line)
            if "waiting for preflight on a daemon thread" in line:
                break
        else:
            raise AssertionError(f"the node never reached its preflight (exit {node.wait(10)}):\n{''.join(seen)}")
        node.send_signal(signal.SIGTERM)
        assert node.wait(10) == 0, "".join(seen) + node.stdout.read()
    finally:
        node.kill()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out.startswith("laminar-kafka ")


def test_building_the_parser_looks_up_no_version() -> None:
    # importlib.metadata (and email) cost every node process tens of ms of CPU at start
    code = "import sys, laminar_kafka.cli.main; laminar_kafka.cli.main.build_parser(); print('importlib.metadata' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize("flag, choices", [("--format", "{" + ",".join(f.value for f in Format) + "}"),
                                           ("--startup-mode", "{earliest,latest,timestamp,specific-offsets}"),
                                           ("--on-bad-record", "{fail,skip}")])
def test_closed_settings_list_and_check_their_choices(flag: str, choices: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert f"{flag} {choices}" in capsys.readouterr().out
    code, _out, err = run_cli(capsys, "run", "--bootstrap", "k:1", "--topic", "t", "--output", "/tmp/o", flag, "nope")
    assert code == 2 and "invalid choice: 'nope'" in err and len(err.strip().splitlines()) == 1
