"""The Iceberg tables' epoch records: read the lake's facts back, and seal a reseed.

Each epoch commit into a topic's table carries, in its snapshot summary, the topic's
:class:`~laminar_kafka.cluster.lake.record.LakeRecord` (``laminar.record``) beside ``laminar.pipeline`` and
``laminar.epoch``: the files and the record land in one catalog commit, and a rollback of the table
rolls both back. Two table properties complete the picture (properties do not roll back):

- ``laminar.epoch.<pipeline>``: the last epoch the pipeline committed into the table (see
  :mod:`laminar_kafka.cluster.lake.iceberg.commit`: it makes a retried commit a no-op);
- ``laminar.seed.<pipeline>``: the epoch of the last reseed that accepted what the table shows.

The table was rolled back (it lost epochs the pipeline committed) when the last epoch committed is
above both the epoch its current snapshot shows and the last seed. A table is committed only in epochs
that had rows of its topic, so an Iceberg lake is not ``dense``: an epoch without rows leaves no record.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError
from pyiceberg.table import Table

from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none
from laminar_kafka.cluster.lake.reconcile import LakeFacts
from laminar_kafka.cluster.lake.record import RECORD_SUMMARY_KEY, LakeRecord

logger = logging.getLogger(__name__)

__all__ = [
    "EPOCH_PREFIX", "latest_record", "pipeline_tables", "read_iceberg_facts", "read_routed_facts", "seal_iceberg",
    "seed_property",
]

EPOCH_PREFIX = "laminar.epoch."


def seed_property(pipeline: str) -> str:
    """The table property holding the epoch of ``pipeline``'s last reseed."""
    return f"laminar.seed.{pipeline}"


def _int_property(table: Table, name: str) -> int:
    value = table.properties.get(name, "0")
    return int(value) if value.isdigit() else 0


def latest_record(table: Table, pipeline: str) -> tuple[int, LakeRecord | None]:
    """The epoch of ``pipeline``'s latest commit in the table's current snapshot lineage (0: none), and
    its record (None for a commit written before records existed). Snapshots of other operations
    (compaction) are skipped."""
    snapshot = table.current_snapshot()
    name = ".".join(table.name())
    while snapshot is not None:
        summary = snapshot.summary
        epoch = summary.get("laminar.epoch") if summary is not None else None
        if summary is not None and summary.get("laminar.pipeline") == pipeline and epoch:
            raw = summary.get(RECORD_SUMMARY_KEY)
            what = f"iceberg table {name} snapshot {snapshot.snapshot_id}"
            record = LakeRecord.from_json(raw, what) if raw else None
            return int(epoch), record
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return 0, None


def read_iceberg_facts(catalog: Catalog, identifiers: Sequence[tuple[str, tuple[str, str]]], pipeline: str) -> LakeFacts:
    """What the tables ``identifiers`` (``(topic, (namespace, table))``) show of ``pipeline``, merged:
    each topic's cursors come from its own table's latest record."""
    epoch = high = rolled = 0
    cursors: dict[str, dict[str, int]] = {}
    topic_ids: dict[str, str] = {}
    others: list[str] = []
    has_records = has_data = False
    where: list[str] = []
    for _topic, identifier in identifiers:
        table = load_table_or_none(catalog, identifier)
        if table is None:
            continue
        name = ".".join(identifier)
        has_data = has_data or table.current_snapshot() is not None
        committed = _int_property(table, f"{EPOCH_PREFIX}{pipeline}")
        seeded = _int_property(table, seed_property(pipeline))
        if not committed:
            others += [k[len(EPOCH_PREFIX):] for k in table.properties if k.startswith(EPOCH_PREFIX)]
            continue
        shown, record = latest_record(table, pipeline)
        high = max(high, committed, seeded)
        if committed > max(shown, seeded):
            rolled = max(rolled, committed)
            logger.info("iceberg table %s shows epoch %d of pipeline %s, which committed epoch %d into it",
                        name, shown, pipeline, committed)
        if record is None:
            continue
        has_records = True
        epoch = max(epoch, shown)
        for source, partitions in record.cursors.items():
            cursors.setdefault(source, {}).update(partitions)
        topic_ids.update(record.topic_ids)
        where.append(f"{name}@{shown}")
    if others and not has_records:
        return LakeFacts(other_pipelines=(sorted(others)[0],), where="iceberg table properties", has_records=True)
    return LakeFacts(
        epoch=epoch, high_epoch=max(high, epoch), cursors=cursors, topic_ids=topic_ids, dense=False,
        rolled_back_from=rolled, has_records=has_records or rolled > 0, has_data=has_data,
        where="iceberg tables " + ", ".join(where) if where else "iceberg tables (no record)",
    )


def seal_iceberg(catalog: Catalog, identifiers: Sequence[tuple[str, tuple[str, str]]], pipeline: str,
                 seed_epoch: int) -> None:
    """After a reseed at ``seed_epoch``: every table the pipeline committed into accepts what it shows
    (``laminar.seed.<pipeline>`` and ``laminar.epoch.<pipeline>`` := ``seed_epoch``, one property-only
    commit), so the next start does not see a rollback again, and commits continue after the seed."""
    for _topic, identifier in identifiers:
        table = load_table_or_none(catalog, identifier)
        if table is None or not _int_property(table, f"{EPOCH_PREFIX}{pipeline}"):
            continue
        with table.transaction() as transaction:
            transaction.set_properties({seed_property(pipeline): str(seed_epoch),
                                        f"{EPOCH_PREFIX}{pipeline}": str(seed_epoch)})


def pipeline_tables(catalog: Catalog, namespace: str, pipeline: str) -> list[tuple[str, str]]:
    """The tables of ``namespace`` that ``pipeline`` committed into (routed tables, found by their
    ``laminar.epoch.<pipeline>`` property), sorted."""
    found = []
    for identifier in _list_tables(catalog, namespace):
        table = load_table_or_none(catalog, identifier)
        if table is not None and f"{EPOCH_PREFIX}{pipeline}" in table.properties:
            found.append(identifier)
    return sorted(found)


def read_routed_facts(catalog: Catalog, namespace: str, pipeline: str) -> LakeFacts:
    """What the tables of a routed pipeline (``table-template``) show: every table commit's record is
    the whole record of its epoch with the tables that epoch committed into (and epochs are committed
    in order across all tables, :class:`~laminar_kafka.cluster.lake.iceberg.commit.IcebergOutput`),
    so the latest epoch ``E`` any table shows is complete when every table its record names shows
    ``E``; then its cursors are exact for every partition. Otherwise the facts say which tables lack
    it (``partial``: a reseed is refused, see :func:`~laminar_kafka.cluster.lake.reconcile.reconcile`)."""
    identifiers = pipeline_tables(catalog, namespace, pipeline)
    shown: dict[str, int] = {}
    latest: LakeRecord | None = None
    high = rolled = 0
    has_data = False
    for identifier in identifiers:
        table = load_table_or_none(catalog, identifier)
        if table is None:
            continue
        has_data = has_data or table.current_snapshot() is not None
        committed = _int_property(table, f"{EPOCH_PREFIX}{pipeline}")
        seeded = _int_property(table, seed_property(pipeline))
        epoch, record = latest_record(table, pipeline)
        high = max(high, committed, seeded)
        if committed > max(epoch, seeded):
            rolled = max(rolled, committed)
        shown[identifier[1]] = epoch
        if record is not None and (latest is None or record.epoch > latest.epoch):
            latest = record
    if latest is None:
        others = [k[len(EPOCH_PREFIX):] for k in _namespace_properties(catalog, namespace) if k.startswith(EPOCH_PREFIX)
                  and k != f"{EPOCH_PREFIX}{pipeline}"]
        if others:
            return LakeFacts(other_pipelines=(sorted(others)[0],), where="iceberg table properties", has_records=True)
        return LakeFacts(high_epoch=high, dense=False, rolled_back_from=rolled, has_records=rolled > 0,
                         has_data=has_data, where="iceberg tables (no record)")
    missing = [name for name in latest.tables if shown.get(name) != latest.epoch]
    partial = ""
    if missing:
        landed = [name for name in latest.tables if name not in missing]
        partial = (f"epoch {latest.epoch} landed in table(s) {', '.join(landed)} of namespace {namespace} but not in "
                   f"{', '.join(missing)}")
    return LakeFacts(
        epoch=latest.epoch, high_epoch=max(high, latest.epoch), cursors=latest.cursors, topic_ids=latest.topic_ids,
        dense=False, rolled_back_from=rolled, has_records=True, has_data=has_data, partial=partial,
        where=f"iceberg tables of namespace {namespace} at epoch {latest.epoch} ({len(identifiers)} table(s))",
    )


def _namespace_properties(catalog: Catalog, namespace: str) -> list[str]:
    """Every table property name of ``namespace``'s tables (to tell another pipeline's tables)."""
    names: list[str] = []
    for identifier in _list_tables(catalog, namespace):
        table = load_table_or_none(catalog, identifier)
        if table is not None:
            names += list(table.properties)
    return names


def _list_tables(catalog: Catalog, namespace: str) -> list[tuple[str, str]]:
    """The tables of ``namespace`` as ``(namespace, table)`` (none when it does not exist yet)."""
    try:
        return [(namespace, identifier[-1]) for identifier in catalog.list_tables(namespace)]
    except NoSuchNamespaceError:
        return []
