"""What a connector author gives the conformance kit: the log backend and the connector factory."""
from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass

from laminar_kafka.connector.errors import ConnectorError
from laminar_kafka.connector.protocol import ConnectorConfig, SourceConnector
from laminar_kafka.errors import LaminarError

__all__ = ["ConformanceError", "ConformanceSkipped", "ConnectorKit", "LogBackend"]


class ConformanceError(ConnectorError):
    """A connector broke a rule of the protocol: ``rule`` names it (a scenario's name)."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule


class ConformanceSkipped(LaminarError):
    """A scenario that cannot run on this backend (the message says why): the kit's signal that
    becomes a pytest skip. Beneath the distribution's root, but not a ConnectorError: a clause that
    handles a connector's failures never swallows it."""


class LogBackend(abc.ABC):
    """The partitioned log a connector reads, as the kit drives it: one topic (or stream family) of
    partitions numbered from 0, whose records have increasing integer offsets in append order (0, 1,
    2... in a dense log such as Kafka's; a log with sparse positions, such as Redis stream IDs,
    overrides :meth:`offsets`). A cursor is the offset of the next record to read; any integer is a
    valid cursor (reading resumes at the first record at or above it).

    Calls come from the kit's thread and may block (they are test set-up, not the data path).
    """

    #: the topic (or stream family) the connector under test reads
    topic: str

    @abc.abstractmethod
    def partitions(self) -> int:
        """How many partitions the topic has now."""

    @abc.abstractmethod
    def append(self, partition: int, count: int) -> None:
        """Append ``count`` records to ``partition``; they are readable when this returns."""

    @abc.abstractmethod
    def end(self, partition: int) -> int:
        """The offset the next record of ``partition`` will get (its high watermark)."""

    def offsets(self, partition: int, start: int, end: int) -> list[int]:
        """The offsets of ``partition``'s records in ``[start, end)``, in order. The default is
        right for a dense log (every integer is a record's offset)."""
        return list(range(max(start, 0), end))

    @abc.abstractmethod
    def add_partition(self) -> int:
        """Add one partition to the topic; returns its number."""

    def committed_offsets(self) -> dict[int, int] | None:
        """The advisory offsets the connector committed per partition (a consumer group's), or None
        when the backend cannot observe them (the advisory-commit scenario is then skipped)."""
        return None


@dataclass(frozen=True)
class ConnectorKit:
    """One connector under test: ``make_connector()`` builds a fresh generation (never started);
    ``config`` starts it at the log's first offsets (its initial position) with the exact-once
    delivery guarantee. Rows carry the partition's topic, number and offset in the columns named
    here (the protocol's metadata columns by default)."""

    backend: LogBackend
    make_connector: Callable[[], SourceConnector]
    config: ConnectorConfig
    topic_column: str = "_topic"
    partition_column: str = "_partition"
    offset_column: str = "_offset"
    #: the longest a scenario waits for records it appended to be read (seconds)
    read_timeout_s: float = 30.0
