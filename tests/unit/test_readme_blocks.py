"""The README's shell blocks as a reader copies them: every `laminar-kafka` command in any of them
parses with the real command line (`build_parser`, nothing run), so no flag the CLI does not accept
is shown; each is marked runnable or an illustration; the runnable blocks (run by tests/integration/test_readme_commands.py) start their own
servers and stop what they start."""
from __future__ import annotations

from pathlib import Path

import pytest

from laminar_kafka.cli.main import build_parser
from laminar_kafka.cluster.errors import UsageError
from tests.markdown_docs import fenced_blocks, laminar_commands

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
COMMANDS = [(block.line, argv) for block in fenced_blocks(README) if block.is_shell
            for argv in laminar_commands(block.text)]


def parse_error(argv: list[str]) -> str | None:
    """Why the `laminar-kafka` command line rejects ``argv`` (None: it parses)."""
    try:
        build_parser().parse_args(argv)
    except UsageError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize(("line", "argv"), COMMANDS, ids=[f"line{line}:{' '.join(argv[:2])}" for line, argv in COMMANDS])
def test_every_readme_command_parses(line: int, argv: list[str]) -> None:
    assert parse_error(argv) is None, f"README.md block at line {line}: laminar-kafka {' '.join(argv)}"


def test_the_commands_are_found() -> None:
    """Not vacuous: the walk-through's and the illustration's commands are all seen."""
    seen = {" ".join(argv[:2]) for _, argv in COMMANDS}
    assert {"dev up", "dev produce", "dev down", "status --pipeline", "redis run", "redis verify"} <= seen
    assert sum(argv[0] == "run" for _, argv in COMMANDS) >= 3


def test_a_wrong_flag_is_caught() -> None:
    shell = 'eval "$(laminar-kafka dev up --exprots)"\nlaminar-kafka status --zk <host:port> --topik t 2> err.log &\n'
    assert [parse_error(argv) is not None for argv in laminar_commands(shell)] == [True, True]
    assert laminar_commands("laminar-kafka run ... --node-id 2 \\\n  --output ./lake  # a comment --x\n") == [
        ["run", "--node-id", "2", "--output", "./lake"]]


def test_every_shell_block_says_whether_it_runs() -> None:
    """A reader knows what to copy: each shell block is marked runnable (run as written by the
    README test) or an illustration (installs, placeholders, more flags)."""
    unmarked = [block.line for block in fenced_blocks(README) if block.is_shell
                and not (block.runnable or block.illustration)]
    assert unmarked == [], f"README.md shell blocks without a runnable/illustration marker at lines {unmarked}"


def test_the_runnable_blocks_start_their_servers_and_stop_what_they_start() -> None:
    runnable = [block for block in fenced_blocks(README) if block.runnable]
    assert runnable and all(block.is_shell for block in runnable)
    commands = [argv for block in runnable for argv in laminar_commands(block.text)]
    assert commands[0][:2] == ["dev", "up"] and commands[-1] == ["dev", "down"]
    text = "".join(block.text for block in runnable)
    started = text.count("&\n")
    assert started >= 2 and text.count("kill -TERM") == 1 and text.count("wait ") >= 1
    assert ["verify" in argv[0] for argv in commands].count(True) == 1
