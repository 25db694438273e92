"""The table-name template (``table-template``): which table each row lands in. Pure, no I/O.

A template is literal text (``[A-Za-z0-9_]``) and placeholders::

    {topic}          the record's topic, dots and dashes as _ (as a topic's default table name)
    {topic:N}        group N (>= 1) of table-topic-regex, matched against the whole topic
    {field:NAME}     the value of the column NAME (integer, string or boolean; true/false)

for example ``{topic}`` (the default: one table per topic, today's layout, no routing at all),
``events_{field:region}``, ``{topic:1}_{field:kind}`` with ``table-topic-regex = (\\w+)\\.v[0-9]+``.
A placeholder's value has its dots and dashes replaced by ``_``; the name it makes must then match
:data:`TABLE_NAME` (a valid Iceberg table name and output directory, never ``_``-prefixed: readers
skip those) and, when ``table-allowed`` is set, fully match that regex. A row whose name cannot be
made or is refused is a bad record with the reason (:mod:`laminar_kafka.cluster.lake.routing`).

:meth:`TableTemplate.parse` validates the three settings at start and raises
:class:`~laminar_kafka.errors.ConfigurationError` in one line (unknown placeholder, unbalanced
brace, bad regex, a group the regex does not have, a companion setting without its placeholder).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from laminar_kafka.errors import ConfigurationError

__all__ = ["DEFAULT_TEMPLATE", "MAX_TABLE_NAME_BYTES", "TABLE_NAME", "FieldPart", "Literal", "TableTemplate", "TopicPart"]

DEFAULT_TEMPLATE = "{topic}"
#: a routed table's name: an Iceberg identifier that is also a safe directory name
TABLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
MAX_TABLE_NAME_BYTES = 200
#: the kinds of column a {field:NAME} takes (the source's required-fields kinds)
FIELD_KINDS = "integer|string|boolean"

_TOKEN = re.compile(r"\{([^{}]*)\}")
_LITERAL = re.compile(r"[A-Za-z0-9_]*")
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLACEHOLDERS = "{topic}, {topic:N} or {field:NAME}"


@dataclass(frozen=True)
class Literal:
    text: str


@dataclass(frozen=True)
class TopicPart:
    """The topic (``group`` None) or one group of ``table-topic-regex``."""

    group: int | None = None


@dataclass(frozen=True)
class FieldPart:
    name: str


Part = Literal | TopicPart | FieldPart


def as_name_part(value: str) -> str:
    """A placeholder's value as it appears in a table name: dots and dashes as ``_``."""
    return value.replace(".", "_").replace("-", "_")


@dataclass(frozen=True)
class TableTemplate:
    """A parsed ``table-template`` with its companions ``table-topic-regex`` and ``table-allowed``."""

    text: str
    parts: tuple[Part, ...]
    topic_regex: re.Pattern[str] | None = None
    allowed: re.Pattern[str] | None = None

    @classmethod
    def parse(cls, text: str = DEFAULT_TEMPLATE, topic_regex: str = "", allowed: str = "") -> TableTemplate:
        """Validate and parse; :class:`ConfigurationError` in one line naming the problem."""
        parts: list[Part] = []
        position = 0
        for match in _TOKEN.finditer(text):
            parts += _literal(text, text[position:match.start()])
            parts.append(_placeholder(text, match.group(1)))
            position = match.end()
        parts += _literal(text, text[position:])
        if not parts:
            raise ConfigurationError("table-template is empty: give a name or placeholders such as {topic}")
        regex = _compile("table-topic-regex", topic_regex)
        groups = [p.group for p in parts if isinstance(p, TopicPart) and p.group is not None]
        if groups and regex is None:
            raise ConfigurationError(f"table-template {text}: {{topic:{groups[0]}}} needs table-topic-regex")
        if regex is not None and not groups:
            raise ConfigurationError(f"table-topic-regex is set but table-template {text} uses no {{topic:N}}")
        if regex is not None and max(groups) > regex.groups:
            raise ConfigurationError(f"table-template {text}: {{topic:{max(groups)}}} but table-topic-regex "
                                     f"{topic_regex} has {regex.groups} group(s)")
        return cls(text, tuple(parts), regex, _compile("table-allowed", allowed))

    @property
    def is_identity(self) -> bool:
        """``{topic}`` alone, no allow-list: one table per topic, rows not routed (today's layout)."""
        return self.parts == (TopicPart(),) and self.allowed is None

    @property
    def fields(self) -> tuple[str, ...]:
        """The columns the template reads, each once, in order."""
        return tuple(dict.fromkeys(p.name for p in self.parts if isinstance(p, FieldPart)))

    def required_fields(self) -> str:
        """The source's ``required-fields`` entries of the template's columns (``""``: none)."""
        return ",".join(f"{name}:{FIELD_KINDS}" for name in self.fields)

    def topic_value(self, topic: str, part: TopicPart) -> str | None:
        """``part``'s value for ``topic`` as a name part; None when the regex does not match."""
        if part.group is None:
            return as_name_part(topic)
        assert self.topic_regex is not None  # parse() guarantees it
        match = self.topic_regex.fullmatch(topic)
        if match is None or match.group(part.group) is None:
            return None
        return as_name_part(match.group(part.group))

    def topic_problem(self, topic: str) -> str:
        """Why rows of ``topic`` cannot be routed ("" when they can, as far as the topic goes)."""
        if self.topic_regex is None:
            return ""
        match = self.topic_regex.fullmatch(topic)
        if match is None:
            return f"table-template: topic {topic} does not match table-topic-regex {self.topic_regex.pattern}"
        for part in self.parts:
            if isinstance(part, TopicPart) and part.group is not None and match.group(part.group) is None:
                return f"table-template: group {part.group} of table-topic-regex matched nothing in topic {topic}"
        return ""

    def name_problem(self, name: str) -> str:
        """Why ``name`` (placeholders already filled) may not be a table ("" when it may)."""
        if not TABLE_NAME.fullmatch(name) or len(name.encode()) > MAX_TABLE_NAME_BYTES:
            shown = name if len(name) <= 80 else name[:80] + "..."
            return (f"table-template: {shown!r} is not a table name ({TABLE_NAME.pattern}, at most "
                    f"{MAX_TABLE_NAME_BYTES} bytes)")
        if self.allowed is not None and self.allowed.fullmatch(name) is None:
            return f"table-template: table {name} is not allowed by table-allowed {self.allowed.pattern}"
        return ""


def _literal(template: str, text: str) -> list[Part]:
    if "{" in text or "}" in text:
        raise ConfigurationError(f"table-template {template}: unbalanced brace in {text!r}")
    if not _LITERAL.fullmatch(text):
        raise ConfigurationError(f"table-template {template}: literal text {text!r} may hold only A-Z a-z 0-9 _")
    return [Literal(text)] if text else []


def _placeholder(template: str, body: str) -> Part:
    kind, _, argument = body.partition(":")
    if body == "topic":
        return TopicPart()
    if kind == "topic" and argument.isdigit() and int(argument) >= 1:
        return TopicPart(int(argument))
    if kind == "field" and _FIELD_NAME.fullmatch(argument):
        return FieldPart(argument)
    raise ConfigurationError(f"table-template {template}: unknown placeholder {{{body}}} (use {_PLACEHOLDERS})")


def _compile(setting: str, pattern: str) -> re.Pattern[str] | None:
    if not pattern:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigurationError(f"{setting} {pattern!r} is not a regular expression: {exc}") from None
