"""The Parquet tree's epoch records: write one per published epoch, read the lake's facts back.

A record is ``<output>/_laminar/epochs/epoch-<E>.json`` (:mod:`cluster.lake_record`), written after
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

from cluster.errors import SinkError
from cluster.lake_record import RECORDS_DIR, LakeRecord, parse_record_name, record_path
from cluster.reconcile import LakeFacts
from coordinator.errors import CodecError

logger = logging.getLogger(__name__)

__all__ = ["RECORDS_KEPT", "write_record", "read_parquet_facts"]

#: records kept in the tree (older ones are deleted as epochs go by); also how far back a start looks
RECORDS_KEPT = 100


def _join(root: str, relative: str) -> str:
    return f"{root.rstrip('/')}/{relative}" if root else relative


def _missing(fs: pafs.FileSystem, root: str, files: Sequence[str]) -> list[str]:
    """Which of ``files`` (relative to ``root``) do not exist as files."""
    if not files:
        return []
    infos = fs.get_file_info([_join(root, f) for f in files])
    return [f for f, info in zip(files, infos) if info.type != pafs.FileType.File]


def write_record(fs: pafs.FileSystem, root: str, record: LakeRecord) -> bool:
    """Leave ``record`` in the tree once every file it lists is published; False (and one WARNING)
    when some are missing: the lake lost them, and must not claim the epoch. Idempotent."""
    path = _join(root, record_path(record.epoch))
    if fs.get_file_info(path).type == pafs.FileType.File:
        return True
    missing = _missing(fs, root, record.files)
    if missing:
        logger.warning("epoch %d is not recorded in the lake: %d of its %d published file(s) are missing (%s)",
                       record.epoch, len(missing), len(record.files), missing[0])
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


def _record_epochs(fs: pafs.FileSystem, root: str) -> list[int]:
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


def read_parquet_facts(fs: pafs.FileSystem, root: str, pipeline: str, topics: Sequence[str]) -> LakeFacts:
    """What the tree shows of ``pipeline``: its latest complete epoch and that record's cursors.
    Raises :class:`CodecError` naming the object when a record does not decode."""
    epochs = _record_epochs(fs, root)
    if not epochs:
        return LakeFacts(has_data=_has_rows(fs, root, topics), dense=True)
    rolled_back_from = 0
    for epoch in epochs[:RECORDS_KEPT]:
        relative = record_path(epoch)
        path = _join(root, relative)
        try:
            with fs.open_input_stream(path) as handle:
                raw = handle.read()
        except FileNotFoundError:  # deleted meanwhile (kept-records cleanup)
            continue
        record = LakeRecord.from_json(raw, f"lake record {path}")
        if record.epoch != epoch:
            raise CodecError(f"lake record {path} holds epoch {record.epoch}")
        if record.pipeline != pipeline:
            return LakeFacts(other_pipelines=(record.pipeline,), where=f"record {relative}", has_records=True)
        if _missing(fs, root, record.files):
            rolled_back_from = max(rolled_back_from, epoch)
            continue
        return LakeFacts(
            epoch=epoch, high_epoch=epochs[0], cursors=record.cursors, topic_ids=record.topic_ids, dense=True,
            rolled_back_from=rolled_back_from, has_records=True, has_data=True, where=f"record {relative}",
        )
    return LakeFacts(high_epoch=epochs[0], rolled_back_from=rolled_back_from, has_records=True, dense=True,
                     has_data=_has_rows(fs, root, topics),
                     where=f"records {record_path(epochs[-1])}..{record_path(epochs[0])}, none complete")
