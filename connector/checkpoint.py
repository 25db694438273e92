"""`SourceCheckpoint`: the exact cursor of a source, stamped with its connector's name, and its strict codec.

Cursor convention (the one place it is stated): for every ``"<name>:<partition>"`` key (a partition
key of the coordinator's manifests, :func:`laminar_kafka.coordinator.codec.format_partition_key`: a
Kafka topic or another log's partitioned stream, and a partition number) the checkpoint holds the
**next position to read**, i.e. ``last emitted position + 1`` or anything above it and at or below
the next record's. A partition that was assigned but has emitted nothing holds its resolved start.

Encoding (UTF-8 JSON object, exactly these keys, canonical: sorted keys, no whitespace)::

    {"assignment_version": <u64>, "connector": "<name>", "format_version": 1,
     "offsets": {"<name>:<partition>": <position>, ...}}

``connector`` names the connector that took the cursor (``"kafka"``, ``"redis-streams"``, ...). Each
connector names itself and checks the cursors it is given through its :class:`CursorFormat`; a
checkpoint the node runtime rebuilds from a manifest's cursors is :data:`UNNAMED` (a manifest holds
the cursors of its pipeline's one connector, not a name), and every connector accepts it.

Decoding is strict: unknown or missing keys, wrong JSON types, booleans used as numbers, negative
or out-of-range integers, non-canonical partition numbers and invalid names all raise
:class:`~laminar_kafka.connector.errors.CheckpointError`. This module does no I/O.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from laminar_kafka.connector.errors import CheckpointError
from laminar_kafka.coordinator.codec import (
    OFFSET_MAX,
    U64_MAX,
    format_partition_key,
    is_int,
    loads,
    parse_partition_key,
)
from laminar_kafka.coordinator.errors import CodecError
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId

__all__ = [
    "CHECKPOINT_FORMAT_VERSION",
    "UNNAMED",
    "CursorFormat",
    "SourceCheckpoint",
    "format_key",
    "parse_key",
]

CHECKPOINT_FORMAT_VERSION: int = 1
#: the name of a checkpoint the runtime rebuilt from a manifest's cursors (see the module docstring)
UNNAMED: str = ""
_KEYS: frozenset[str] = frozenset({"connector", "format_version", "assignment_version", "offsets"})
_NAME_RE = re.compile(r"[a-z][a-z0-9_.-]{0,63}")


def format_key(topic: str, partition: int) -> str:
    """The checkpoint key ``"name:partition"``. Pre: a valid name (Kafka's topic-name rules),
    0 <= partition < 2**31.

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

    ``offsets`` maps ``"name:partition"`` to the next position to read (``last emitted + 1``);
    ``assignment_version`` is the published vnode-assignment version the cursor was taken under
    (``0`` = unassigned / single node); ``connector`` names the connector that took it
    (:data:`UNNAMED` for cursors rebuilt from a manifest). Instances are immutable; ``offsets`` is a
    read-only mapping sorted by key, so equal cursors compare and encode identically.
    """

    offsets: Mapping[str, int] = field(default_factory=dict)
    assignment_version: int = 0
    connector: str = UNNAMED
    format_version: int = CHECKPOINT_FORMAT_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.connector, str) or not (
            self.connector == UNNAMED or _NAME_RE.fullmatch(self.connector)
        ):
            raise CheckpointError(f"invalid checkpoint connector name {self.connector!r}")
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
        return hash((tuple(self.offsets.items()), self.assignment_version, self.connector))

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def empty(cls, assignment_version: int = 0, connector: str = UNNAMED) -> SourceCheckpoint:
        """A checkpoint with no partitions (``notify_epoch_committed`` treats it as a no-op)."""
        return cls({}, assignment_version, connector)

    @classmethod
    def from_partitions(
        cls, offsets: Mapping[TopicPartitionId, int], assignment_version: int = 0, connector: str = UNNAMED
    ) -> SourceCheckpoint:
        """Build from ``{(name, partition): next_position}``."""
        return cls({format_key(t, p): o for (t, p), o in offsets.items()}, assignment_version, connector)

    @classmethod
    def of_sorted_valid(cls, offsets: dict[str, int], assignment_version: int, connector: str) -> SourceCheckpoint:
        """A checkpoint of ``offsets`` the caller guarantees canonical: keys made by
        :func:`format_key`, in key order, positions in range, a valid name; nothing is checked or
        copied (a connector building one per batch pays only for the dict)."""
        checkpoint = object.__new__(cls)
        object.__setattr__(checkpoint, "offsets", MappingProxyType(offsets))
        object.__setattr__(checkpoint, "assignment_version", assignment_version)
        object.__setattr__(checkpoint, "connector", connector)
        object.__setattr__(checkpoint, "format_version", CHECKPOINT_FORMAT_VERSION)
        return checkpoint

    # -- access ---------------------------------------------------------------------------------

    @property
    def is_empty(self) -> bool:
        return not self.offsets

    def partitions(self) -> dict[TopicPartitionId, int]:
        """``{(name, partition): next_position}`` (a fresh dict)."""
        return {parse_key(k): o for k, o in self.offsets.items()}

    def next_offset(self, topic: str, partition: int) -> int | None:
        """The next position to read for one partition, or ``None`` if the checkpoint lacks it."""
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


@dataclass(frozen=True)
class CursorFormat:
    """How one connector names its checkpoints and checks the cursors it is given (its hook).

    ``name`` stamps every checkpoint the connector takes; ``also_reads`` are other names whose
    checkpoints it accepts (those an earlier release stamped differently). A connector whose
    positions obey more rules than "an integer in ``[0, 2**63)``" subclasses this and overrides
    :meth:`check_cursor`.
    """

    name: str
    also_reads: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for name in (self.name, *self.also_reads):
            if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
                raise CheckpointError(f"invalid connector name {name!r} (lower-case letters, digits, '_.-')")

    def check_cursor(self, partition: TopicPartitionId, position: int) -> None:
        """Raise :class:`CheckpointError` if ``position`` cannot be a cursor of ``partition`` here.
        The default accepts every position the checkpoint itself accepts."""

    def stamp(self, offsets: Mapping[TopicPartitionId, int], assignment_version: int = 0) -> SourceCheckpoint:
        """This connector's checkpoint of ``{(name, partition): next_position}``."""
        return SourceCheckpoint.from_partitions(offsets, assignment_version, self.name)

    def accept(self, checkpoint: SourceCheckpoint) -> SourceCheckpoint:
        """``checkpoint`` if this connector may resume from it: its name is this connector's, one
        of ``also_reads`` or :data:`UNNAMED`, and :meth:`check_cursor` accepts every cursor. Raises
        :class:`CheckpointError` otherwise (a checkpoint of another connector is never read)."""
        if checkpoint.connector not in (self.name, UNNAMED, *self.also_reads):
            raise CheckpointError(
                f"checkpoint belongs to connector {checkpoint.connector!r}, not {self.name!r}"
            )
        for partition, position in checkpoint:
            self.check_cursor(partition, position)
        return checkpoint

    def decode(self, data: bytes) -> SourceCheckpoint:
        """:meth:`SourceCheckpoint.from_bytes`, then :meth:`accept`."""
        return self.accept(SourceCheckpoint.from_bytes(data))
