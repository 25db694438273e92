"""`dev up --exports` / `dev status --exports`: shell lines that `eval` turns into the settings `run`,
`status` and `verify` read; `dev produce` refuses bad counts before it touches Kafka."""
from __future__ import annotations

import os
import subprocess

import pytest

from laminar_kafka.cli import main as cli
from laminar_kafka.cli.dev import shell_exports


def test_the_exports_are_the_settings_names_quoted_for_a_shell() -> None:
    text = shell_exports("127.0.0.1:9092", "127.0.0.1:2181", {"AWS_SECRET_ACCESS_KEY": "a b'c"})
    assert text.splitlines()[:2] == ["export LAMINAR_BOOTSTRAP=127.0.0.1:9092", "export LAMINAR_ZK=127.0.0.1:2181"]
    shown = subprocess.run(["bash", "-c", f'{text}printf "%s|%s|%s" "$LAMINAR_BOOTSTRAP" "$LAMINAR_ZK" '
                                          '"$AWS_SECRET_ACCESS_KEY"'],
                           capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]})
    assert shown.stdout == "127.0.0.1:9092|127.0.0.1:2181|a b'c"


def test_the_exported_names_are_run_settings() -> None:
    from laminar_kafka.cluster.config import SETTING_NAMES, env_name

    names = {line.split("=")[0].removeprefix("export ") for line in shell_exports("b", "z").splitlines()}
    assert names == {env_name("bootstrap"), env_name("zk")} and {"bootstrap", "zk"} <= set(SETTING_NAMES)


@pytest.mark.parametrize("argv", [["dev", "up", "--exports", "--json"], ["dev", "status", "--exports", "--json"],
                                  ["dev", "produce", "--topic", "t", "--records", "-1", "--bootstrap", "b:1"],
                                  ["dev", "produce", "--topic", "t", "--records", "1", "--partitions", "0",
                                   "--bootstrap", "b:1"],
                                  ["dev", "produce", "--records", "1"]])
def test_usage_errors_are_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.startswith("error: ")
