"""The Iceberg output: each committed epoch becomes exactly one Iceberg commit per table.

After the coordinator commits epoch ``E`` (its manifest lists every node's staged files), every node
calls :meth:`IcebergOutput.publish`. Per table (one per topic: the first directory of a file's
published path; ``_rejected/`` belongs to no table), inside a bounded retry loop that reloads the
table on every attempt:

- ``p`` = the table property ``laminar.epoch.<pipeline>`` (0 when absent). ``p >= E``: done.
- Otherwise every epoch ``e`` in ``(max(p, oldest_epoch - 1), E]`` whose manifest lists files of the
  table is committed, in order, so no epoch is ever skipped because a later one landed first. For
  each: the files are published (idempotent renames, :func:`laminar_kafka.cluster.lake.parquet.sink.publish`), then ONE
  transaction evolves the schema once to take every file (new columns, wider types, columns made
  optional: :mod:`laminar_kafka.cluster.lake.iceberg.evolution`), adds the files
  (snapshot summary ``laminar.pipeline`` / ``laminar.epoch``) and sets ``laminar.epoch.<pipeline>``
  to ``e``: the snapshot and the property land in one atomic catalog commit, so a retry after a
  crash sees the property and never adds the files twice.

A commit that loses a race (``CommitFailedException``) is retried with jittered backoff (20 attempts
or 30 s, then :class:`SinkError`), and so is every catalog call while the catalog is unavailable
(connection refused or reset, a timeout, an answer 5xx: a catalog restarting): the loop reloads the
table first, so a commit whose answer was lost is found by its epoch property, never made twice. A
catalog away longer than that stops the node in one line (started again, it reconciles with the
lake). A file whose schema the table cannot take fails with a :class:`SinkError` naming the table,
the column and both types, and nothing is committed.

Upsert mode: the node whose commit of epoch ``e`` succeeded deletes ``e``'s change files (no data
files of the table). A node finding one gone reloads the table: holding ``e``, it lost a race (retried:
found done); else the :class:`SinkError` stands (committed output lost).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.commits import CommitListener, IgnoreCommits
from laminar_kafka.cluster.lake.iceberg.evolution import apply_evolution, plan_evolution
from laminar_kafka.cluster.lake.iceberg.partitions import append_data_files, check_partitioning, partition_spec_of
from laminar_kafka.cluster.lake.iceberg.records import (
    pipeline_tables,
    read_iceberg_facts,
    read_routed_facts,
    seal_iceberg,
)
from laminar_kafka.cluster.lake.iceberg.retries import RETRYABLE, TRANSIENT, RetryPolicy
from laminar_kafka.cluster.lake.iceberg.tables import (
    absolute_path,
    describe_error,
    ensure_namespace,
    iceberg_schema_of,
    load_table_or_none,
    open_catalog,
    table_location,
)
from laminar_kafka.cluster.lake.iceberg.upsert import check_keys, keyed_arrow_schema, keyed_schema
from laminar_kafka.cluster.lake.iceberg.upsert_commit import commit_upsert, delete_change_files
from laminar_kafka.cluster.lake.parquet import sink
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.reconcile import LakeFacts
from laminar_kafka.cluster.lake.record import RECORD_SUMMARY_KEY, LakeRecord, RecordOf, no_records
from laminar_kafka.cluster.lake.settings import IcebergSettings, TableFormat, TableLocation
from laminar_kafka.cluster.lake.staged_names import final_path
from laminar_kafka.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["TABLE_PROPERTIES", "IcebergOutput", "committed_epoch", "epoch_property", "without_blind_retries"]

ManifestOutputs = Callable[[int], "tuple[str, ...] | None"]
PublishFiles = Callable[[pafs.FileSystem, str, Iterable[str]], int]


def epoch_property(pipeline: str) -> str:
    """The table property recording the last epoch of ``pipeline`` committed into the table."""
    return f"laminar.epoch.{pipeline}"


#: pyiceberg would otherwise retry a failed commit by re-applying the same files on top of the
#: winner's snapshot, blind to ``laminar.epoch.<pipeline>``: a duplicate. Our own loop retries instead.
TABLE_PROPERTIES = {"commit.retry.num-retries": "0"}
#: the retries of an output given none (frozen, so one value serves every output)
DEFAULT_RETRY = RetryPolicy()


def without_blind_retries(table: Table) -> Table:
    """``table``, after a property-only commit setting :data:`TABLE_PROPERTIES` when it lacks them
    (a table created by someone else). A property-only commit is never retried by pyiceberg. After
    such a commit ``table`` is the catalog's current table, which may hold commits made since it was
    loaded: a caller re-checks what it decided on the older one."""
    missing = {k: v for k, v in TABLE_PROPERTIES.items() if table.properties.get(k) != v}
    if not missing:
        return table
    with table.transaction() as transaction:
        transaction.set_properties(missing)
    return table


def committed_epoch(table: Table, pipeline: str) -> int:
    """The last epoch of ``pipeline`` committed into ``table`` (0 when none)."""
    return int(table.properties.get(epoch_property(pipeline), "0"))


class IcebergOutput:
    """A pipeline's Iceberg tables: preflight (:meth:`check`) and exactly-once :meth:`publish`.

    ``fs``/``root`` locate the output (as :func:`laminar_kafka.cluster.lake.parquet.sink.open_output` returns them);
    ``output_uri`` is the output as configured. Tables live at ``<output>/<topic>``. The catalog is
    opened on first use. ``final_path_of`` and ``publish_files`` are the sink's layout and publish
    (replaceable in tests). ``record_of``: the record each committed epoch leaves in its snapshot
    summary (default: none); ``commit_listener`` hears each commit, lost race and no-op (default:
    nobody). Thread-compatible: one caller at a time.
    """

    table_format = TableFormat.ICEBERG

    def __init__(
        self, settings: IcebergSettings, partitioning: PartitionSpec, pipeline: str, output_uri: str,
        fs: pafs.FileSystem, root: str, *,
        final_path_of: Callable[[str], str] = final_path,
        publish_files: PublishFiles = sink.publish,
        retry: RetryPolicy = DEFAULT_RETRY,
        record_of: RecordOf = no_records,
        commit_listener: CommitListener | None = None,
    ) -> None:
        self.settings = settings
        self.partitioning = partitioning
        self.pipeline = pipeline
        self.output_uri = output_uri
        self.fs = fs
        self.root = root.rstrip("/")
        self.retry = retry
        self._final_path_of = final_path_of
        self._publish_files = publish_files
        self._catalog: Catalog | None = None
        self._topics: tuple[str, ...] = ()
        self._record_of = record_of
        self._commit_listener = commit_listener if commit_listener is not None else IgnoreCommits()
        #: manifest outputs grouped by topic, per epoch (a cache: manifests never change)
        self._outputs: dict[int, dict[str, list[str]]] = {}
        #: per topic, an epoch through which its table is known to hold every listed file
        self._through: dict[str, int] = {}
        #: routed: an epoch through which every table is known to hold every listed file
        self._walked = 0

    # --- catalog and tables ----------------------------------------------------------------------

    @property
    def catalog(self) -> Catalog:
        """The catalog, opened on first use (raises :class:`ConfigurationError`)."""
        if self._catalog is None:
            self._catalog = open_catalog(self.settings, self.fs, self.root)
        return self._catalog

    def identifier(self, topic: str) -> tuple[str, str]:
        return (self.settings.namespace, self.settings.table_of(topic))

    def table(self, topic: str) -> Table:
        """The topic's table, freshly loaded. Raises :class:`SinkError` when it does not exist."""
        table = load_table_or_none(self.catalog, self.identifier(topic))
        if table is None:
            raise SinkError(f"iceberg table {'.'.join(self.identifier(topic))} does not exist")
        return table

    def check(self, topics: Sequence[str], schema: pa.Schema | None) -> None:
        """Preflight at start: open the catalog, create the namespace, and for each topic check its
        existing table (partition spec, and that it takes ``schema`` when given) or create it (when
        ``schema`` is known). Raises :class:`ConfigurationError` with one line; writes nothing else."""
        self._topics = () if self.settings.routed else tuple(topics)  # routed: tables made on first use
        catalog = self.catalog
        namespace = self.settings.namespace
        try:
            ensure_namespace(catalog, namespace)
            for topic in self._topics:
                table = load_table_or_none(catalog, self.identifier(topic))
                if table is not None:
                    if schema is not None:
                        self._check_takes(table, schema, source="the records", error=ConfigurationError)
                    check_partitioning(table, self.partitioning)
                    check_keys(".".join(table.name()), table.schema().identifier_field_names(), self.settings.upsert_keys)
                elif schema is not None:
                    self._create(topic, schema)
        except ConfigurationError:
            raise
        except Exception as exc:  # noqa: BLE001 - a catalog failure at start is one line
            reason = describe_error(exc)
            if "location" in reason.lower() and self.settings.table_location is TableLocation.OUTPUT:
                reason += " (a catalog that places its tables itself: set table-location=catalog)"
            raise ConfigurationError(f"iceberg catalog check failed for namespace {namespace}: {reason}",
                              cause=exc) from None

    def _create(self, topic: str, schema: pa.Schema) -> Table:
        """Create the topic's table (or load it when a concurrent creator won); in upsert mode
        keyed: the upsert keys are its identifier fields, and ``_op`` is not a column."""
        keys = self.settings.upsert_keys
        iceberg_schema = iceberg_schema_of(keyed_arrow_schema(schema, keys) if keys else schema)
        iceberg_schema = keyed_schema(iceberg_schema, keys) if keys else iceberg_schema
        spec = partition_spec_of(self.partitioning, iceberg_schema)
        identifier = self.identifier(topic)
        location: str | None = None  # TableLocation.CATALOG: the catalog places it
        if self.settings.table_location is TableLocation.OUTPUT:
            location = table_location(self.fs, self.root, topic)
        logger.info("creating iceberg table %s at %s", ".".join(identifier), location or "the catalog's place")
        ensure_namespace(self.catalog, self.settings.namespace)
        return self.catalog.create_table_if_not_exists(
            identifier, schema=iceberg_schema, location=location, partition_spec=spec,
            properties=dict(TABLE_PROPERTIES),
        )

    def _check_takes(self, table: Table, schema: pa.Schema, *, source: str, error: type[Exception]) -> None:
        conflict = plan_evolution(table.schema(), [iceberg_schema_of(schema)]).conflict
        if conflict is not None:
            raise error(conflict.describe(".".join(table.name()), source, source))

    # --- the lake's records ------------------------------------------------------------------------

    def read_facts(self, pipeline: str, topics: Sequence[str]) -> LakeFacts:
        """Each topic's table's latest record (:mod:`laminar_kafka.cluster.lake.iceberg.records`); routed:
        the latest epoch of all the pipeline's tables."""
        if self.settings.routed:
            return read_routed_facts(self.catalog, self.settings.namespace, pipeline)
        return read_iceberg_facts(self.catalog, [(t, self.identifier(t)) for t in topics], pipeline)

    def seal(self, seed: LakeRecord, shown_epoch: int) -> None:
        """Every table of the seed's topics accepts what it shows as of the seed's epoch."""
        topics = sorted({key.rpartition(":")[0] for cursors in seed.cursors.values() for key in cursors}
                        | set(seed.topic_ids) | set(self._topics))
        tables = [(t, self.identifier(t)) for t in topics]
        if self.settings.routed:
            tables = [(i[1], i) for i in pipeline_tables(self.catalog, self.settings.namespace, seed.pipeline)]
        seal_iceberg(self.catalog, tables, seed.pipeline, seed.epoch)

    # --- publish ---------------------------------------------------------------------------------

    def publish(
        self,
        epoch: int,
        staged: tuple[str, ...],
        manifest_outputs: ManifestOutputs,
        oldest_epoch: int,
        *,
        tables_through: int | None = None,
    ) -> int:
        """Publish committed epoch ``epoch`` (``staged``: manifest ``epoch``'s staged paths) into the
        tables, catching up earlier epochs of each table first; files outside any table (``_rejected/``)
        are published as plain files. With ``tables_through``, the tables are committed only up to
        that epoch (another node's turn for the later ones). Idempotent; returns how many Iceberg
        commits this call made. Raises :class:`SinkError`."""
        self._outputs[epoch] = self._files_by_topic(staged)
        for old in [e for e in self._outputs if e < oldest_epoch - 1]:
            del self._outputs[old]
        outside = [relative for relative in staged if self._final_path_of(relative).startswith("_")]
        if outside:  # rejected records: published as files, never part of a table
            self._publish_files(self.fs, self.root, outside)
        through = epoch if tables_through is None else min(epoch, tables_through)
        commits = 0
        if through < 1:
            return commits
        if self.settings.routed:  # epoch by epoch over all tables: a table showing E implies every e < E landed
            for e in range(max(self._walked, oldest_epoch - 1) + 1, through + 1):
                for table in sorted(self._outputs_of(e, manifest_outputs) or ()):
                    commits += self._publish_table(table, e, manifest_outputs, oldest_epoch)
            self._walked = max(self._walked, through)
            return commits
        for topic in sorted(set(self._outputs[epoch]) | set(self._topics) | set(self._through)):
            commits += self._publish_table(topic, through, manifest_outputs, oldest_epoch)
        return commits

    def _files_by_topic(self, staged: Iterable[str]) -> dict[str, list[str]]:
        """The staged row files grouped by topic (``_rejected/`` and other ``_`` dirs skipped)."""
        groups: dict[str, list[str]] = {}
        for relative in staged:
            published = self._final_path_of(relative)
            head, sep, _ = published.partition("/")
            if sep and head.startswith("_"):
                continue
            if sep:
                topic = head
            elif len(self._topics) == 1:  # a flat layout: the pipeline's single topic
                topic = self._topics[0]
            else:
                raise SinkError(f"cannot tell the topic of {published!r} (no topic directory)")
            groups.setdefault(topic, []).append(relative)
        return groups

    def _outputs_of(self, epoch: int, manifest_outputs: ManifestOutputs) -> dict[str, list[str]] | None:
        if epoch not in self._outputs:
            outputs = manifest_outputs(epoch)
            if outputs is None:
                return None
            self._outputs[epoch] = self._files_by_topic(outputs)
        return self._outputs[epoch]

    def _pending(self, topic: str, after: int, epoch: int,
                 manifest_outputs: ManifestOutputs) -> list[tuple[int, list[str]]]:
        """Epochs in ``(after, epoch]`` with files of ``topic``, ascending, with those files."""
        pending = []
        for e in range(after + 1, epoch + 1):
            outputs = self._outputs_of(e, manifest_outputs)
            if outputs is None:
                logger.warning("manifest of epoch %d is unknown; table of %s cannot catch it up", e, topic)
                continue
            files = outputs.get(topic)
            if files:
                pending.append((e, files))
        return pending

    def _publish_table(self, topic: str, epoch: int, manifest_outputs: ManifestOutputs, oldest_epoch: int) -> int:
        """Commit every pending epoch of ``topic``'s table up to ``epoch``; the number of commits."""
        name = ".".join(self.identifier(topic))
        started = time.monotonic()
        pending: list[tuple[int, list[str]]] | None = None
        if topic in self._through:  # known: find the work without asking the catalog
            pending = self._pending(topic, max(self._through[topic], oldest_epoch - 1), epoch, manifest_outputs)
            if not pending:
                self._through[topic] = max(self._through[topic], epoch)
                return 0
        commits = 0
        unavailable = False
        for attempt in range(self.retry.attempts):
            try:
                table = load_table_or_none(self.catalog, self.identifier(topic))
                done = committed_epoch(table, self.pipeline) if table is not None else 0
                if done >= epoch:
                    self._through[topic] = done
                    if commits == 0:
                        self._commit_listener.found_done(name)
                    return commits
                if pending is None:
                    pending = self._pending(topic, max(done, oldest_epoch - 1), epoch, manifest_outputs)
                    if len(pending) > 1:
                        logger.info("iceberg table %s catches up %d epoch(s) up to %d", name, len(pending), epoch)
                for e, files in pending:
                    if e <= done:
                        continue
                    table = self._commit_epoch(table, topic, e, files)
                    done = e
                    commits += 1
                self._through[topic] = epoch
                return commits
            except RETRYABLE + TRANSIENT + (OSError,) as exc:  # OSError: the object store (see _commit_epoch)
                elapsed = time.monotonic() - started
                if attempt + 1 >= self.retry.attempts or elapsed >= self.retry.deadline_s:
                    raise SinkError(
                        f"iceberg commit of epoch {epoch} into {name} kept failing after {attempt + 1} "
                        f"attempt(s) in {elapsed:.1f}s: {describe_error(exc)}", cause=exc,
                    ) from None
                if isinstance(exc, TRANSIENT + (OSError,)):
                    role = "catalog" if isinstance(exc, TRANSIENT) else "object store"
                    if not unavailable:  # once per publish: the retries follow at DEBUG
                        unavailable = True
                        logger.warning("iceberg %s unavailable while publishing epoch %d into %s (%s); "
                                       "retrying for up to %.0f s", role, epoch, name, describe_error(exc),
                                       self.retry.deadline_s)
                    logger.debug("iceberg %s unavailable for %s (attempt %d): %s", role, name, attempt + 1, exc)
                else:
                    logger.debug("iceberg commit into %s lost a race (attempt %d): %s", name, attempt + 1, exc)
                    self._commit_listener.lost_race(name)
                time.sleep(self.retry.delay(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _commit_epoch(self, table: Table | None, topic: str, epoch: int, files: list[str]) -> Table:
        """Publish epoch ``epoch``'s files of ``topic`` and commit them in one transaction."""
        published = [self._final_path_of(relative) for relative in files]
        try:
            self._publish_files(self.fs, self.root, files)
            schemas = [self._file_schema(relative) for relative in published]
        except SinkError:
            self._unless_done(topic, epoch)
            raise
        if table is None:
            table = self._create(topic, schemas[0])  # the epoch's commit evolves it to take every file
        name = ".".join(table.name())
        try:  # a spec evolved under the pipeline: its files' rows may span the new spec's partitions
            check_partitioning(table, self.partitioning)
        except ConfigurationError as exc:
            raise SinkError(f"cannot add epoch {epoch}'s files: {exc}", cause=exc) from None
        table = without_blind_retries(table)
        # one evolution of the table (as now loaded) to take every file: schema versions may be mixed
        keys = self.settings.upsert_keys  # upsert mode: the table's columns are the rows' but _op, keys required
        evolution = plan_evolution(table.schema(), [iceberg_schema_of(keyed_arrow_schema(schema, keys) if keys else schema)
                                                    for schema in schemas])
        if evolution.conflict is not None:
            source = f"file {published[evolution.conflict.file_index]}"
            raise SinkError(evolution.conflict.describe(name, source, "the file"))
        if committed_epoch(table, self.pipeline) >= epoch:
            # a property-only commit answers with the table as it is now, which may hold this epoch
            # already (another node committed it meanwhile): adding the files on top would duplicate
            # them. Lost race: the retry reloads the table and finds the epoch done.
            raise CommitFailedException(f"epoch {epoch} of {name} was committed by another node meanwhile")
        paths = [absolute_path(self.fs, self.root, relative) for relative in published]
        summary = {"laminar.pipeline": self.pipeline, "laminar.epoch": str(epoch)}
        record = self._record_of(epoch)
        if record is not None:  # where the pipeline stands, in the same catalog commit as the rows
            routed = record.routed(tuple(self._outputs[epoch])) if self.settings.routed else None
            summary[RECORD_SUMMARY_KEY] = (routed or record.only_topic(topic)).to_json().decode()
        started = time.monotonic()
        try:
            if keys:  # copy-on-write of the touched keys, one transaction too
                commit_upsert(table, keys, paths, summary, {epoch_property(self.pipeline): str(epoch)},
                              evolution.steps)
            else:
                with table.transaction() as transaction:
                    if evolution.steps:
                        with transaction.update_schema() as update:
                            apply_evolution(update, evolution.steps)
                    append_data_files(transaction, paths, summary)
                    transaction.set_properties({epoch_property(self.pipeline): str(epoch)})
        except RETRYABLE + TRANSIENT:
            raise
        # Any other OSError is the object store failing a read of a file's footer or a write of the
        # manifests (a store restarting, a reset pooled connection: found by the chaos campaign's
        # store-restart): left to _publish_table, which retries it as safely as a catalog's.
        except (ValueError, OverflowError, FileNotFoundError) as exc:
            if isinstance(exc, FileNotFoundError):  # a change file (its epoch done?) or a data file (lost)
                self._unless_done(topic, epoch)
            # OverflowError: pyiceberg reads a timestamp column's statistics as datetime, which
            # stops at year 9999 (the source rejects such a _timestamp; a payload column may hold one)
            hint = " (a timestamp or date column holds a value outside years 1-9999)" if isinstance(exc, OverflowError) else ""
            raise SinkError(f"cannot add epoch {epoch}'s files to iceberg table {name}: {describe_error(exc)}{hint}",
                            cause=exc) from None
        self._commit_listener.committed(name, time.monotonic() - started)
        if keys:  # consumed by the commit, and no data files of the table: they go
            delete_change_files(self.fs, self.root, published)
        logger.debug("iceberg table %s: epoch %d committed (%d file(s))", name, epoch, len(paths))
        return table

    def _unless_done(self, topic: str, epoch: int) -> None:
        """Upsert mode, a change file of ``epoch`` gone: a lost race when the table holds ``epoch`` now."""
        table = load_table_or_none(self.catalog, self.identifier(topic)) if self.settings.upsert_keys else None
        if table is not None and committed_epoch(table, self.pipeline) >= epoch:
            raise CommitFailedException(f"epoch {epoch} of {'.'.join(table.name())} was committed by another node, "
                                        f"which deleted its change files")

    def _file_schema(self, relative: str) -> pa.Schema:
        path = f"{self.root}/{relative}" if self.root else relative
        try:
            with self.fs.open_input_file(path) as stream:
                return pq.read_schema(stream)
        except (FileNotFoundError, pa.ArrowException) as exc:  # another OSError: the store, retried
            raise SinkError(f"cannot read the schema of published file {relative!r}: {exc}", cause=exc) from exc
