"""Which topics a source reads: an explicit list, or a pattern that later topics may match (pure).

The ``topic`` property is either a comma-separated list of names (``orders,refunds``) or one regular
expression prefixed with ``re:`` (``re:orders\\..*``), matched against the *whole* topic name
(:func:`re.fullmatch`). A pattern never matches Kafka's internal topics (names starting with ``__``,
such as ``__consumer_offsets`` and ``__transaction_state``). Topics created later that match a
pattern are read like the ones present at start: from their first offset.

This module does no I/O.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from laminar_kafka.errors import ConfigurationError

__all__ = ["PATTERN_PREFIX", "TopicSelector"]

#: The prefix that makes the ``topic`` property a regular expression.
PATTERN_PREFIX = "re:"

_TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")


def _topic_name(name: str) -> str:
    if not _TOPIC_RE.fullmatch(name) or name in (".", ".."):
        raise ConfigurationError(f"topic: invalid topic name {name!r}")
    return name


@dataclass(frozen=True)
class TopicSelector:
    """Exactly one of ``names`` (explicit topics, in the order given) or ``pattern`` (a regex)."""

    names: tuple[str, ...] = ()
    pattern: str | None = None

    def __post_init__(self) -> None:
        if (self.pattern is None) == (not self.names):
            raise ConfigurationError("a topic selector needs either topic names or one pattern")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ConfigurationError(f"topic pattern {self.pattern!r} is not a valid regular expression: {exc}") from None

    @classmethod
    def parse(cls, value: str) -> TopicSelector:
        """``"a,b"`` -> names; ``"re:<regex>"`` -> pattern. Raises :class:`ConfigurationError`."""
        text = value.strip()
        if text.startswith(PATTERN_PREFIX):
            pattern = text[len(PATTERN_PREFIX):]
            if not pattern:
                raise ConfigurationError("topic: 're:' needs a regular expression after it")
            return cls(pattern=pattern)
        names = tuple(_topic_name(t.strip()) for t in text.split(",") if t.strip())
        if not names:
            raise ConfigurationError("missing required property 'topic'")
        if len(set(names)) != len(names):
            raise ConfigurationError(f"topic lists a topic twice: {value!r}")
        return cls(names=names)

    @property
    def is_pattern(self) -> bool:
        return self.pattern is not None

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is selected (a named topic, or a non-internal topic the pattern matches)."""
        if self.pattern is None:
            return topic in self.names
        return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None

    def select(self, available: Iterable[str]) -> tuple[str, ...]:
        """The selected topics among ``available`` (sorted for a pattern; the named order otherwise,
        keeping only the names present)."""
        present = set(available)
        if self.pattern is None:
            return tuple(t for t in self.names if t in present)
        return tuple(sorted(t for t in present if self.matches(t)))

    def __str__(self) -> str:
        return PATTERN_PREFIX + self.pattern if self.pattern is not None else ",".join(self.names)
