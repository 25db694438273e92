"""Every suppression of `make lint` says why (docs/development.md, "Lint and types").

ruff's RUF100 already fails on a ``noqa`` that silences nothing and mypy's ``warn_unused_ignores``
on a ``type: ignore`` that does; this test asks the rest: each names its code and gives its reason.
"""
from __future__ import annotations

import re
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: mypy reads these (through laminar_kafka/<folder>); ruff reads every Python file
TYPED = ("laminar_kafka", "coordinator", "connector", "kafka_source", "redis_source", "cluster", "devstack")
NOQA = re.compile(r"#\s*noqa\b(?P<rest>.*)$")
NOQA_WITH_REASON = re.compile(r"^: [A-Z]+[0-9]+(?:, [A-Z]+[0-9]+)* - \S")
IGNORE = re.compile(r"#\s*type:\s*ignore(?P<rest>.*)$")
IGNORE_WITH_REASON = re.compile(r"^\[[a-z-]+(?:,\s*[a-z-]+)*\]\s+#\s*\S")


def _python_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "*.py"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode()
    return sorted(path for path in listed.split("\0") if path and (ROOT / path).is_file())


def _comments(path: str) -> list[tuple[int, str]]:
    """The comments of a file (line, text): a suppression inside a string is not one."""
    with tokenize.open(ROOT / path) as file:
        return [(token.start[0], token.string) for token in tokenize.generate_tokens(file.readline)
                if token.type == tokenize.COMMENT]


def _offenders(pattern: re.Pattern[str], wanted: re.Pattern[str], paths: list[str]) -> list[str]:
    found = []
    for path in paths:
        for number, comment in _comments(path):
            match = pattern.search(comment)
            if match and not wanted.match(match["rest"]):
                found.append(f"{path}:{number}: {comment}")
    return found


def test_every_noqa_names_its_code_and_gives_its_reason() -> None:
    assert _offenders(NOQA, NOQA_WITH_REASON, _python_files()) == [], "write `# noqa: CODE - <why>`"


def test_every_type_ignore_of_the_typed_code_names_its_code_and_gives_its_reason() -> None:
    typed = [path for path in _python_files() if path.split("/", 1)[0] in TYPED]
    assert _offenders(IGNORE, IGNORE_WITH_REASON, typed) == [], "write `# type: ignore[code]  # <why>`"


def test_the_patterns_tell_a_reason_from_none() -> None:
    assert NOQA_WITH_REASON.match(": BLE001 - a failing callback must not end the loop")
    assert not NOQA_WITH_REASON.match(": BLE001")
    assert not NOQA_WITH_REASON.match("")
    assert IGNORE_WITH_REASON.match("[assignment]  # docker binds (address, port)")
    assert not IGNORE_WITH_REASON.match("[assignment]")
    assert not IGNORE_WITH_REASON.match("")
