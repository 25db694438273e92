"""The reference tables of ``docs/settings.md``, generated from the settings' declarations.

``python -m laminar_kafka.cli.settings_doc`` rewrites the tables between the markers
``<!-- generated: <table> -->`` and ``<!-- end generated: <table> -->`` in ``docs/settings.md``;
``--check`` only compares and exits 1 when the file differs from what the declarations give (a unit
test runs the same comparison). The prose around the tables is written by hand. Pure apart from
:func:`main`.
"""
from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from laminar_kafka.cluster.settings_def import NODE_SETTINGS, env_name
from laminar_kafka.connector.settings import Layer, Setting
from laminar_kafka.kafka_source.config.definitions import SOURCE_SETTINGS

__all__ = ["DOC", "generated", "main", "node_table", "source_table"]

DOC = Path(__file__).resolve().parents[2] / "docs" / "settings.md"
_BLOCK = re.compile(r"(<!-- generated: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- end generated: (?P=name) -->)",
                    re.DOTALL)
#: a partition term such as bucket[N](f), which Markdown would read as a link
_TERM = re.compile(r"(\w+\[\w+\]\(\w+\))")


def _cell(text: str) -> str:
    """``text`` as a table cell: ``|`` escaped, ``bucket[N](f)`` a code span (no link), and a ``<``
    (``<output>``) kept from reading as HTML."""
    return _TERM.sub(r"`\1`", text.replace("|", "\\|").replace("<", "&lt;"))


def _default(setting: Setting) -> str:
    if setting.shown_default or setting.required:
        return _cell(setting.default_text)
    return f"`{setting.default_text}`" if setting.default_text else ""


def _meaning(setting: Setting, *, old_names: bool) -> str:
    """The doc (plain text, escaped), its choices and unit, then the notes (Markdown, as written)."""
    text = setting.doc
    if setting.choices:
        text += f" (one of {', '.join(setting.choices)})"
    if setting.unit and not setting.name.endswith(setting.unit):
        text += f"; in {setting.unit}"
    cell = _cell(text) + "."
    if setting.notes:
        cell += f" {setting.notes}"
    if old_names and setting.old_names:
        cell += f" 0.1.0 spelled it {', '.join(f'`{name}`' for name in setting.old_names)}: still read, deprecated."
    return cell


def _table(header: str, rows: Iterable[str]) -> str:
    return "\n".join([header, "| --- | --- | --- |", *rows]) + "\n"


def source_table(settings: Mapping[str, Setting] = SOURCE_SETTINGS) -> str:
    """The source's properties: key, default, meaning."""
    return _table("| key | default | meaning |", (
        f"| `{name}` | {_default(setting)} | {_meaning(setting, old_names=True)} |"
        for name, setting in settings.items()
    ))


def node_table(settings: Mapping[str, Setting] = NODE_SETTINGS) -> str:
    """A node's settings: name (flag, TOML key; environment variable), default, meaning."""
    return _table("| setting | default | meaning |", (
        f"| `{name}` (`{env_name(name)}`) | {_default(setting)} | "
        f"{_meaning(setting, old_names=False)}{' Passed through to the source.' if setting.layer is Layer.BOTH else ''} |"
        for name, setting in settings.items()
    ))


TABLES = {"source-settings": source_table, "node-settings": node_table}


def generated(text: str) -> str:
    """``text`` with every generated block replaced by its table; a block naming no known table
    raises :class:`KeyError`."""
    return _BLOCK.sub(lambda match: match.group(1) + TABLES[match.group("name")]() + match.group(4), text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m laminar_kafka.cli.settings_doc", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/settings.md is not up to date")
    parser.add_argument("--path", type=Path, default=DOC, help="the document (default docs/settings.md)")
    args = parser.parse_args(argv)
    current = args.path.read_text()
    wanted = generated(current)
    if args.check:
        if wanted != current:
            print(f"{args.path} differs from the settings' declarations: run python -m laminar_kafka.cli.settings_doc",
                  file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        args.path.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
