"""The record an epoch leaves in the lake beside its data: where the pipeline stands. Pure, no I/O.

ZooKeeper (or the embedded state directory) coordinates; the lake remembers (docs/settings.md). Every
epoch a pipeline publishes leaves, atomically with the rows it makes visible, a :class:`LakeRecord`:
the pipeline, the epoch, its assignment version, the Kafka topic ids and the next offset of every
partition. A node that finds its control state lost or rolled back continues from it.

Where it lives:

- Parquet tree: ``<output>/_laminar/epochs/epoch-<E:010d>.json`` (readers skip ``_`` paths), written
  after every file of the epoch is published; it lists those files, so the epoch is complete in the
  lake exactly when its record exists and every file it lists does (:mod:`laminar_kafka.cluster.lake.outputs`).
- Iceberg: the snapshot summary key ``laminar.record`` of the epoch's commit into each table, holding
  only that table's topic (:mod:`laminar_kafka.cluster.lake.iceberg.records`); the commit adds the files and the record
  in one catalog commit. Tables routed by a ``table-template`` (a topic's rows in many tables) hold
  the whole record instead, with ``tables``: every table the epoch committed into (:meth:`LakeRecord.routed`).

Encoding: canonical JSON with ``"format_version": 1``; decoding is strict (:mod:`laminar_kafka.coordinator.codec`):
a missing or unknown key, a wrong type or an unknown version is a :class:`CodecError` naming the
object it was read from. Nothing is guessed.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from laminar_kafka.coordinator.codec import (
    Cursors,
    decode_cursors,
    dumps,
    encode_cursors,
    expect_int,
    expect_list,
    expect_object,
    expect_str,
    is_topic_name,
    loads,
)
from laminar_kafka.coordinator.errors import CodecError

__all__ = [
    "LAKE_RECORD_FORMAT_VERSION", "RECORDS_DIR", "RECORD_SUMMARY_KEY", "LakeRecord", "RecordOf", "no_records",
    "record_path", "parse_record_name",
]

#: the encoding this code writes, and the only one it reads
LAKE_RECORD_FORMAT_VERSION: int = 1
#: the Parquet tree's records, relative to the output root
RECORDS_DIR = "_laminar/epochs"
#: the Iceberg snapshot summary key holding a table's record
RECORD_SUMMARY_KEY = "laminar.record"

_KEYS = ("format_version", "pipeline", "epoch", "assignment_version", "cursors", "topic_ids", "files")
_NAME_RE = re.compile(r"epoch-([0-9]{10}|[1-9][0-9]{10,18})\.json")


def record_path(epoch: int) -> str:
    """The Parquet tree's record of ``epoch``, relative to the output root (names sort by epoch)."""
    return f"{RECORDS_DIR}/epoch-{epoch:010d}.json"


def parse_record_name(name: str) -> int | None:
    """The epoch of a record's file name (``epoch-0000000042.json`` -> 42); None for any other name."""
    match = _NAME_RE.fullmatch(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class LakeRecord:
    """Where ``pipeline`` stands in the lake once epoch ``epoch`` is visible.

    ``cursors``: source identity -> ``topic:partition`` -> next offset to read (the manifest's, or for
    an Iceberg table those of its topic). ``topic_ids``: the Kafka topic ids the cursors count in.
    ``files``: the epoch's published files, relative to the output root (the Parquet tree; empty for
    Iceberg, whose snapshot is the list). ``tables``: a routed pipeline's tables the epoch committed
    into (empty otherwise; encoded only when not empty).
    """

    pipeline: str
    epoch: int
    assignment_version: int
    cursors: Cursors
    topic_ids: Mapping[str, str] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    tables: tuple[str, ...] = ()

    def to_json(self) -> bytes:
        body = {
            "format_version": LAKE_RECORD_FORMAT_VERSION,
            "pipeline": self.pipeline,
            "epoch": self.epoch,
            "assignment_version": self.assignment_version,
            "cursors": encode_cursors(self.cursors),
            "topic_ids": dict(sorted(self.topic_ids.items())),
            "files": list(self.files),
        }
        if self.tables:
            body["tables"] = list(self.tables)
        return dumps(body)

    @classmethod
    def from_json(cls, raw: bytes | str, what: str) -> LakeRecord:
        """Strict decoding of the record read from ``what`` (named in every error)."""
        data = expect_object(loads(raw, what), what, _KEYS, ("tables",))
        version = expect_int(data["format_version"], f"{what}: format_version")
        if version != LAKE_RECORD_FORMAT_VERSION:
            raise CodecError(f"{what}: unknown format_version {version} (this code reads {LAKE_RECORD_FORMAT_VERSION})")
        ids = data["topic_ids"]
        if not isinstance(ids, dict):
            raise CodecError(f"{what}: topic_ids must be a JSON object")
        topic_ids = {}
        for topic, topic_id in ids.items():
            if not is_topic_name(topic):
                raise CodecError(f"{what}: topic_ids key {topic!r} is not a Kafka topic name")
            topic_ids[topic] = expect_str(topic_id, f"{what}: topic_ids[{topic}]", nonempty=True)
        return cls(
            pipeline=expect_str(data["pipeline"], f"{what}: pipeline", nonempty=True),
            epoch=expect_int(data["epoch"], f"{what}: epoch"),
            assignment_version=expect_int(data["assignment_version"], f"{what}: assignment_version"),
            cursors=decode_cursors(data["cursors"], f"{what}: cursors"),
            topic_ids=topic_ids,
            files=tuple(expect_str(f, f"{what}: files[{i}]", nonempty=True)
                        for i, f in enumerate(expect_list(data["files"], f"{what}: files"))),
            tables=tuple(expect_str(t, f"{what}: tables[{i}]", nonempty=True)
                         for i, t in enumerate(expect_list(data.get("tables", []), f"{what}: tables"))),
        )

    def only_topic(self, topic: str) -> LakeRecord:
        """This record restricted to ``topic``'s partitions and id (an Iceberg table's record)."""
        prefix = f"{topic}:"
        cursors = {s: {k: v for k, v in c.items() if k.startswith(prefix)} for s, c in self.cursors.items()}
        ids = {topic: self.topic_ids[topic]} if topic in self.topic_ids else {}
        return LakeRecord(self.pipeline, self.epoch, self.assignment_version, cursors, ids, ())


    def routed(self, tables: tuple[str, ...]) -> LakeRecord:
        """This record whole, naming the ``tables`` its epoch committed into (a routed pipeline's
        Iceberg table record: any table's latest commit tells every partition's cursor)."""
        return LakeRecord(self.pipeline, self.epoch, self.assignment_version, self.cursors, self.topic_ids, (),
                          tuple(sorted(tables)))


#: the record epoch E leaves in the lake, or None (an unknown manifest; a lake without records)
RecordOf = Callable[[int], "LakeRecord | None"]


def no_records(_epoch: int) -> LakeRecord | None:
    """The :data:`RecordOf` of a lake that leaves no records (tests of publishing alone)."""
    return None
