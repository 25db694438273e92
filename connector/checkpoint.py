"""`SourceCheckpoint`: the exact Kafka cursor of a source, and its strict codec.

Cursor convention (the one place it is stated): for every ``"topic:partition"`` key the checkpoint
holds the **next offset to read**, i.e. ``last emitted offset + 1``. A partition that was assigned
but has emitted nothing holds its resolved start offset. With transactional topics the next offset
may lie past transaction markers (it is the consumer position), so it can exceed
``last emitted + 1``; it is never smaller.

Encoding (UTF-8 JSON object, exactly these keys)::

    {"connector": "kafka", "format_version": 1, "assignment_version": <u64>,
     "offsets": {"<topic>:<partition>": <offset>, ...}}

Decoding is strict: unknown or missing keys, wrong JSON types, booleans used as numbers, negative
or out-of-range integers, non-canonical partition numbers and invalid topic names all raise
:class:`~laminar_kafka.kafka_source.errors.CheckpointError`. This module does no I/O.
"""
from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from laminar_kafka.coordinator.codec import OFFSET_MAX, U64_MAX, format_partition_key, is_int, loads, parse_partition_key
from laminar_kafka.coordinator.errors import CodecError
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.kafka_source.errors import CheckpointError

__all__ = [
    "CHECKPOINT_FORMAT_VERSION",
    "CONNECTOR_NAME",
    "CursorCheckpoints",
    "SourceCheckpoint",
    "format_key",
    "parse_key",
]

CONNECTOR_NAME: str = "kafka"
CHECKPOINT_FORMAT_VERSION: int = 1
_KEYS: frozenset[str] = frozenset({"connector", "format_version", "assignment_version", "offsets"})

def format_key(topic: str, partition: int) -> str:
    """The checkpoint key ``"topic:partition"``. Pre: valid Kafka topic name, 0 <= partition < 2**31.

    One implementation for the whole project: :func:`laminar_kafka.coordinator.codec.format_partition_key` (the
    manifests' cursor keys), with its error raised as :class:`CheckpointError`.
    """
    try:
        return format_partition_key(topic, partition)
    except CodecError as exc:
        raise CheckpointError(exc.message, cause=exc) from exc


def parse_key(key: str) -> TopicPartitionId:
    """Inverse of :func:`format_key`; raises :class:`CheckpointError` on any non-canonical key."""
    try:
        return parse_partition_key(key)
    except CodecError as exc:
        raise CheckpointError(f"checkpoint {exc.message}", cause=exc) from exc


@dataclass(frozen=True, eq=True)
class SourceCheckpoint:
    """The cursor of exactly the rows a source has emitted.

    ``offsets`` maps ``"topic:partition"`` to the next offset to read (``last emitted + 1``);
    ``assignment_version`` is the published vnode-assignment version the cursor was taken under
    (``0`` = unassigned / single node). Instances are immutable; ``offsets`` is a read-only mapping
    sorted by key, so equal cursors compare and encode identically.
    """

    offsets: Mapping[str, int] = field(default_factory=dict)
    assignment_version: int = 0
    connector: str = CONNECTOR_NAME
    format_version: int = CHECKPOINT_FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.connector != CONNECTOR_NAME:
            raise CheckpointError(f"checkpoint belongs to connector {self.connector!r}, not 'kafka'")
        if not is_int(self.format_version) or self.format_version != CHECKPOINT_FORMAT_VERSION:
            raise CheckpointError(f"unsupported checkpoint format_version {self.format_version!r}")
        if not is_int(self.assignment_version) or not 0 <= self.assignment_version <= U64_MAX:
            raise CheckpointError(f"invalid assignment_version {self.assignment_version!r}")
        if not isinstance(self.offsets, Mapping):
            raise CheckpointError("checkpoint offsets must be a mapping")
        for key, offset in self.offsets.items():
            parse_key(key)
            if not is_int(offset) or not 0 <= offset <= OFFSET_MAX:
                raise CheckpointError(f"invalid offset {offset!r} for {key!r}")
        object.__setattr__(self, "offsets", MappingProxyType(dict(sorted(self.offsets.items()))))

    def __hash__(self) -> int:
        return hash((tuple(self.offsets.items()), self.assignment_version))

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def empty(cls, assignment_version: int = 0) -> SourceCheckpoint:
        """A checkpoint with no partitions (``notify_epoch_committed`` treats it as a no-op)."""
        return cls({}, assignment_version)

    @classmethod
    def from_partitions(
        cls, offsets: Mapping[TopicPartitionId, int], assignment_version: int = 0
    ) -> SourceCheckpoint:
        """Build from ``{(topic, partition): next_offset}``."""
        return cls({format_key(t, p): o for (t, p), o in offsets.items()}, assignment_version)

    @classmethod
    def _of_sorted_valid(cls, offsets: dict[str, int], assignment_version: int) -> SourceCheckpoint:
        """A checkpoint of ``offsets`` the caller guarantees canonical: keys made by
        :func:`format_key`, in key order, offsets in range; nothing is checked or copied."""
        checkpoint = object.__new__(cls)
        object.__setattr__(checkpoint, "offsets", MappingProxyType(offsets))
        object.__setattr__(checkpoint, "assignment_version", assignment_version)
        object.__setattr__(checkpoint, "connector", CONNECTOR_NAME)
        object.__setattr__(checkpoint, "format_version", CHECKPOINT_FORMAT_VERSION)
        return checkpoint

    # -- access ---------------------------------------------------------------------------------

    @property
    def is_empty(self) -> bool:
        return not self.offsets

    def partitions(self) -> dict[TopicPartitionId, int]:
        """``{(topic, partition): next_offset}`` (a fresh dict)."""
        return {parse_key(k): o for k, o in self.offsets.items()}

    def next_offset(self, topic: str, partition: int) -> int | None:
        """The next offset to read for one partition, or ``None`` if the checkpoint lacks it."""
        return self.offsets.get(format_key(topic, partition))

    def __iter__(self) -> Iterator[tuple[TopicPartitionId, int]]:
        return iter(self.partitions().items())

    # -- codec ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "connector": self.connector,
            "format_version": self.format_version,
            "assignment_version": self.assignment_version,
            "offsets": dict(self.offsets),
        }

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, no whitespace): equal checkpoints give equal text."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def to_bytes(self) -> bytes:
        return self.to_json().encode("utf-8")

    @classmethod
    def from_dict(cls, data: object) -> SourceCheckpoint:
        """Strict inverse of :meth:`to_dict`; raises :class:`CheckpointError` on any deviation."""
        if not isinstance(data, dict):
            raise CheckpointError(f"checkpoint must be a JSON object, got {type(data).__name__}")
        keys = set(data)
        if keys != _KEYS:
            unknown = sorted(map(str, keys - _KEYS))
            missing = sorted(_KEYS - keys)
            raise CheckpointError(f"checkpoint keys mismatch: unknown={unknown} missing={missing}")
        if not isinstance(data["connector"], str):
            raise CheckpointError("checkpoint 'connector' must be a string")
        if not is_int(data["format_version"]):
            raise CheckpointError("checkpoint 'format_version' must be an integer")
        if not is_int(data["assignment_version"]):
            raise CheckpointError("checkpoint 'assignment_version' must be an integer")
        offsets = data["offsets"]
        if not isinstance(offsets, dict):
            raise CheckpointError("checkpoint 'offsets' must be a JSON object")
        return cls(
            offsets=offsets,
            assignment_version=data["assignment_version"],
            connector=data["connector"],
            format_version=data["format_version"],
        )

    @classmethod
    def from_json(cls, text: str) -> SourceCheckpoint:
        """Strict JSON (:func:`laminar_kafka.coordinator.codec.loads`: no duplicate keys, no NaN, no fractions)."""
        try:
            data = loads(text, "checkpoint")
        except CodecError as exc:
            raise CheckpointError(exc.message, cause=exc) from exc
        return cls.from_dict(data)

    @classmethod
    def from_bytes(cls, data: bytes) -> SourceCheckpoint:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise CheckpointError(f"checkpoint bytes expected, got {type(data).__name__}")
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CheckpointError("checkpoint is not UTF-8", cause=exc) from exc
        return cls.from_json(text)


class CursorCheckpoints:
    """Checkpoints of a source's cursor, built at the cost of a dict per call: the checkpoint keys
    of the cursor's partitions, and their order, are computed once per set of partitions (a source
    builds a checkpoint per batch; formatting, checking and sorting every key each time cost a node
    on 1,000 partitions a fifth of its event loop at 2,000 records/s).

    Pre: the cursor's offsets are in range (they come from the Kafka client's positions).
    """

    def __init__(self) -> None:
        self._partitions: frozenset[TopicPartitionId] = frozenset()
        self._order: list[tuple[str, TopicPartitionId]] = []

    def of(self, cursor: Mapping[TopicPartitionId, int], assignment_version: int) -> SourceCheckpoint:
        """:meth:`SourceCheckpoint.from_partitions` of ``cursor``, equal to it in every way."""
        if cursor.keys() != self._partitions:
            self._partitions = frozenset(cursor)
            self._order = sorted((format_key(t, p), (t, p)) for t, p in self._partitions)
        if not 0 <= assignment_version <= U64_MAX:
            raise CheckpointError(f"invalid assignment_version {assignment_version!r}")
        return SourceCheckpoint._of_sorted_valid({key: cursor[tp] for key, tp in self._order}, assignment_version)
