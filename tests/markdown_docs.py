"""Reading the project's Markdown as its tests check it: fenced blocks with the HTML comment marking
them, the `laminar-kafka` commands of a shell block as argument lists, and relative links. Pure."""
from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Block", "ILLUSTRATION_MARKER", "RUNNABLE_MARKER", "fenced_blocks", "laminar_commands", "links", "prose"]

#: the comment, on the line before a fence, that marks a shell block the README test runs as written
RUNNABLE_MARKER = "<!-- runnable"
#: the comment that marks a shell block shown, not run (installs, placeholders, more flags)
ILLUSTRATION_MARKER = "<!-- illustration"

_FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)\s*$")
#: a redirection: `2> file`, `>> file`, `< file`, `2>&1`
_REDIRECT = re.compile(r"(?<![\w<])\d*(?:>>?|<)(?:&\d+|\s*[^\s;&|<>]+)")
#: a placeholder a reader fills in: `<host:port>`
_PLACEHOLDER = re.compile(r"<[A-Za-z][^<>\s]*>")
_SUBSTITUTION = re.compile(r"\$\(([^()]*)\)")
_OPERATORS = {";", "&", "&&", "|", "||", "(", ")", ";;"}


@dataclass(frozen=True)
class Block:
    """A fenced block: its info string (``sh``, ``python``...), its text, the line its fence opens
    on (1-based), and the HTML comment on the line before the fence ("" when none)."""

    language: str
    text: str
    line: int
    marker: str

    @property
    def runnable(self) -> bool:
        return self.marker.startswith(RUNNABLE_MARKER)

    @property
    def illustration(self) -> bool:
        return self.marker.startswith(ILLUSTRATION_MARKER)

    @property
    def is_shell(self) -> bool:
        return self.language in ("sh", "bash", "shell", "console")


def fenced_blocks(markdown: str) -> list[Block]:
    """Every fenced block of ``markdown``, in order."""
    blocks: list[Block] = []
    lines = markdown.splitlines()
    index = 0
    while index < len(lines):
        opened = _FENCE.match(lines[index])
        if not opened:
            index += 1
            continue
        fence, language, start = opened.group(1), opened.group(2), index
        index += 1
        body: list[str] = []
        while index < len(lines) and not lines[index].startswith(fence):
            body.append(lines[index])
            index += 1
        previous = lines[start - 1].strip() if start > 0 else ""
        blocks.append(Block(language, "\n".join(body) + "\n", start + 1,
                            previous if previous.startswith("<!--") else ""))
        index += 1
    return blocks


def _commands_of_line(line: str) -> Iterator[list[str]]:
    """The simple commands of one shell line (continuations joined), words as the shell splits them
    (quotes removed); redirections and placeholders dropped; ``$(...)`` searched too."""
    line = _REDIRECT.sub(" ", _PLACEHOLDER.sub("PLACEHOLDER", line))
    for inner in _SUBSTITUTION.findall(line):
        yield from _commands_of_line(inner)
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    command: list[str] = []
    for token in lexer:
        if token in _OPERATORS:
            if command:
                yield command
            command = []
        else:
            command.append(token)
    if command:
        yield command


def laminar_commands(shell: str) -> list[list[str]]:
    """The arguments of every ``laminar-kafka`` command in ``shell`` (after the word
    ``laminar-kafka``, wherever it stands: ``eval "$(laminar-kafka ...)"``, ``exec node1
    laminar-kafka ...``), an ellipsis word (``...``: "the flags above") left out."""
    found = []
    for line in shell.replace("\\\n", " ").splitlines():
        for command in _commands_of_line(line):
            if "laminar-kafka" in command:
                found.append([w for w in command[command.index("laminar-kafka") + 1:] if w != "..."])
    return found


def prose(markdown: str) -> str:
    """``markdown`` without its fenced blocks and code spans (where a link is text, not a link)."""
    kept = []
    inside = None
    for line in markdown.splitlines():
        opened = _FENCE.match(line)
        if inside is None and opened:
            inside = opened.group(1)
        elif inside is not None and line.startswith(inside):
            inside = None
        elif inside is None:
            kept.append(line)
    return re.sub(r"`[^`]*`", "", "\n".join(kept))


def links(markdown: str) -> list[str]:
    """The targets of the links and images of ``markdown``'s prose: ``[text](target)``,
    ``[label]: target``, ``href="target"`` and ``src="target"``."""
    text = prose(markdown)
    return (re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
            + re.findall(r"^\s*\[[^\]]+\]:\s*(\S+)", text, re.MULTILINE)
            + re.findall(r"(?:href|src)=\"([^\"]+)\"", text))
