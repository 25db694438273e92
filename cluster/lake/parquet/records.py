"""The Parquet tree's epoch records: write one per published epoch, read the lake's facts back.

A record is ``<output>/_laminar/epochs/epoch-<E>.json`` (:mod:`laminar_kafka.cluster.lake.record`), written after
every file of epoch E is published, through a temporary name and a move (on an object store the PUT
of the copy is atomic), so a reader finds it whole or not at all. It lists the epoch's files: the
epoch is complete in the lake exactly when its record exists and every file it lists does. A record
whose files are gone (deleted, or a bucket restored from an older backup) marks an epoch the lake
recorded and lost (``rolled_back_from``).

Every node publishes every epoch, so each writes the record unless it exists (same content). The
last :data:`RECORDS_KEPT` records are kept; older ones are deleted as new ones are written.
"""
from __future__ import annotations

import logging
import posixpath
import uuid
from collections.abc import Sequence

import pyarrow.fs as pafs

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.reconcile import LakeFacts
from laminar_kafka.cluster.lake.record import RECORDS_DIR, LakeRecord, parse_record_name, record_path
from laminar_kafka.coordinator.errors import CodecError

logger = logging.getLogger(__name__)

__all__ = ["RECORDS_KEPT", "write_record", "read_record", "read_parquet_facts", "drop_records_after"]

#: records kept in the tree (older ones are deleted as epochs go by); also how far back a start looks
RECORDS_KEPT = 100


def _join(root: str, relative: str) -> str:
    return f"{root.rstrip('/')}/{relative}" if root else relative


def _missing(fs: pafs.FileSystem, root: str, files: Sequence[str]) -> list[str]:
    """Which of ``files`` (relative to ``root``) do not exist as files."""
    if not files:
        return []
    infos = fs.get_file_info([_join(root, f) for f in files])
    return [f for f, info in zip(files, infos, strict=True) if info.type != pafs.FileType.File]


def write_record(fs: pafs.FileSystem, root: str, record: LakeRecord) -> bool:
    """Leave ``record`` in the tree (called once its files are published); True when this call wrote
    it, False when it was there. Idempotent. The record claims nothing by itself: a reader counts the
    epoch whole only while every file it lists exists, so a record of an epoch whose files are already
    gone records the loss (and a hole, when later epochs' files are there) instead of hiding it."""
    path = _join(root, record_path(record.epoch))
    if fs.get_file_info(path).type == pafs.FileType.File:
        return False
    directory = posixpath.dirname(path)
    try:
        fs.create_dir(directory, recursive=True)
        tmp = f"{directory}/.tmp-{uuid.uuid4().hex}"
        with fs.open_output_stream(tmp) as out:
            out.write(record.to_json())
        fs.move(tmp, path)
        if record.epoch > RECORDS_KEPT:
            try:
                fs.delete_file(_join(root, record_path(record.epoch - RECORDS_KEPT)))
            except FileNotFoundError:
                pass
    except OSError as exc:
        raise SinkError(f"cannot write the lake record of epoch {record.epoch} at {path}: {exc}", cause=exc) from exc
    return True


def drop_records_after(fs: pafs.FileSystem, root: str, shown_epoch: int, seed_epoch: int) -> int:
    """Delete the records of epochs in ``(shown_epoch, seed_epoch)``: epochs the lake lost, which a
    reseed lands again under new numbers. Returns how many were deleted."""
    doomed = [e for e in _record_epochs(fs, root) if shown_epoch < e < seed_epoch]
    for epoch in doomed:
        try:
            fs.delete_file(_join(root, record_path(epoch)))
        except FileNotFoundError:
            pass
    if doomed:
        logger.info("deleted the lake records of %d lost epoch(s) (%d-%d)", len(doomed), min(doomed), max(doomed))
    return len(doomed)


def _record_epochs(fs: pafs.FileSystem, root: str) -> list[int]:
    """The epochs of the records in the tree, newest first."""
    selector = pafs.FileSelector(_join(root, RECORDS_DIR), allow_not_found=True)
    epochs = []
    for info in fs.get_file_info(selector):
        epoch = parse_record_name(posixpath.basename(info.path)) if info.type == pafs.FileType.File else None
        if epoch is not None:
            epochs.append(epoch)
    return sorted(epochs, reverse=True)


def _has_rows(fs: pafs.FileSystem, root: str, topics: Sequence[str]) -> bool:
    for topic in topics:
        selector = pafs.FileSelector(_join(root, topic), recursive=True, allow_not_found=True)
        if any(i.type == pafs.FileType.File and i.path.endswith(".parquet") for i in fs.get_file_info(selector)):
            return True
    return False


def read_record(fs: pafs.FileSystem, root: str, epoch: int) -> LakeRecord | None:
    """The record of ``epoch`` (None when absent); CodecError naming the object when it does not decode."""
    path = _join(root, record_path(epoch))
    try:
        with fs.open_input_stream(path) as handle:
            raw = handle.read()
    except FileNotFoundError:
        return None
    record = LakeRecord.from_json(raw, f"lake record {path}")
    if record.epoch != epoch:
        raise CodecError(f"lake record {path} holds epoch {record.epoch}")
    return record


def read_parquet_facts(fs: pafs.FileSystem, root: str, pipeline: str, topics: Sequence[str]) -> LakeFacts:
    """What the tree shows of ``pipeline``: the latest epoch up to which every recorded epoch is whole,
    and that record's cursors. The newest :data:`RECORDS_KEPT` records are checked, every file each
    lists: an epoch whose files are gone makes the lake end before it (``rolled_back_from``: the
    newest record). Files of later epochs still there beside such a gap are a ``hole``: rewinding
    would land them twice. Raises :class:`CodecError` naming the object when a record does not decode."""
    epochs = _record_epochs(fs, root)[:RECORDS_KEPT]
    if not epochs:
        return LakeFacts(has_data=_has_rows(fs, root, topics), dense=True)
    records = [r for r in (read_record(fs, root, e) for e in sorted(epochs)) if r is not None]
    others = sorted({r.pipeline for r in records if r.pipeline != pipeline})
    if others:
        return LakeFacts(other_pipelines=tuple(others), where=f"records under {RECORDS_DIR}", has_records=True)
    whole: LakeRecord | None = None
    lost: list[tuple[LakeRecord, list[str]]] = []  # from the first epoch with a missing file on
    for record in records:
        missing = _missing(fs, root, record.files)
        if lost or missing:
            lost.append((record, missing))
        else:
            whole = record
    hole = ""
    if lost:
        kept = [(r.epoch, f) for r, missing in lost for f in r.files if f not in missing]
        if kept:
            hole = (f"epoch {lost[0][0].epoch} lost files but epoch {kept[0][0]}'s {kept[0][1]} is still there: "
                    f"rewinding to epoch {whole.epoch if whole else 0} would land it twice; restore the missing files")
    high = epochs[0]
    if whole is None:  # not one whole record: a wiped tree starts again, anything else is a hole
        rows = _has_rows(fs, root, topics)
        if rows and not hole:
            hole = (f"none of the last {len(records)} epochs' records (epochs {records[0].epoch}-{high}) is whole, "
                    "yet rows are published: the lake lost files it cannot say the cursors of")
        return LakeFacts(high_epoch=high, rolled_back_from=high, has_records=True, dense=True, has_data=rows,
                         hole=hole, where=f"records {record_path(records[0].epoch)}..{record_path(high)}")
    return LakeFacts(
        epoch=whole.epoch, high_epoch=high, cursors=whole.cursors, topic_ids=whole.topic_ids, dense=True,
        rolled_back_from=high if lost else 0, has_records=True, has_data=True, hole=hole,
        where=f"record {record_path(whole.epoch)}",
    )
