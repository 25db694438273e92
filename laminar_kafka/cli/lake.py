"""`laminar-kafka verify` and `laminar-kafka compact`: the commands that read or maintain the lake.

Both find the lake as `run` does: ``--config FILE`` (its ``table-format``, ``pipeline``,
``namespace``, ``table``, ``catalog-uri`` and ``[iceberg]`` table), then ``LAMINAR_*`` variables,
then the flags. pyiceberg is imported only for an Iceberg lake.

`verify` audits a Parquet tree (every published file) or an Iceberg table (the data files of its
current snapshot) against the topic: exit 0 only if nothing is missing or duplicated; a published file
that does not parse as Parquet (truncated, corrupted) is a finding too, one ``damaged file`` line naming
it and what is wrong, exit 1 (a lake it cannot reach at all is exit 2).

`compact` rewrites small files into files of about ``--target-file-bytes`` (``--codec``, zstd by
default), beside a running pipeline and its readers. A Parquet tree (local filesystem only): per leaf
directory, the small files of epochs older than every kept epoch record, swapped in atomically (a
reader lists all the old files or all the new ones); replaced directories are deleted after
``--grace``. An Iceberg table: one atomic commit, then snapshots older than ``--expire-after`` are
expired (keeping ``--retain-last``) with the data files no retained snapshot needs. Without
``--table-format``, an output holding an Iceberg catalog or table is compacted as Iceberg.
``--every`` repeats it until SIGTERM or Ctrl-C (a failed pass is one line on stderr).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any

from laminar_kafka.cli.common import (
    Parser,
    add_common,
    add_kafka_client,
    configure_command_logging,
    kafka_client_of,
)
from laminar_kafka.cluster.errors import ClusterError, UsageError
from laminar_kafka.cluster.lake.parquet.compaction_plan import (
    DEFAULT_GRACE_S,
    DEFAULT_TARGET_FILE_BYTES,
    Codec,
    CompactionSettings,
)
from laminar_kafka.cluster.lake.settings import IcebergSettings, LakeTarget, TableFormat, table_name_of
from laminar_kafka.errors import LaminarError

__all__ = ["add_lake_commands", "lake_target"]

#: the settings of `run` that say where the lake is (the rest of a config file is ignored here)
_LAKE_SETTINGS = ("table-format", "pipeline", "namespace", "table", "catalog-uri", "table-template", "table-allowed")


def lake_target(args: argparse.Namespace, env: Mapping[str, str]) -> LakeTarget:
    """The lake of ``args`` (flags over ``LAMINAR_*`` over ``--config``). Raises :class:`UsageError`."""
    from laminar_kafka.cluster.config import env_name
    from laminar_kafka.cluster.config_file import as_str, passthrough_tables, read_config_file
    from laminar_kafka.cluster.settings_def import NODE_SETTINGS, node_default

    file_values = read_config_file(getattr(args, "config", None))
    values: dict[str, str] = {}
    for name in _LAKE_SETTINGS:
        for source in (file_values.get(name), file_values.get(name.replace("-", "_")), env.get(env_name(name)),
                       getattr(args, name.replace("-", "_"), None)):
            if source is not None:
                values[name] = as_str(name, source)
    choices = NODE_SETTINGS["table-format"].choices
    table_format = values.get("table-format", node_default("table-format"))
    if table_format not in choices:
        raise UsageError(f"table-format={table_format!r}: expected one of {', '.join(choices)}")
    pipeline = values.get("pipeline", node_default("pipeline"))
    iceberg = None
    if table_format == TableFormat.ICEBERG.value:
        iceberg = IcebergSettings(
            namespace=values.get("namespace") or table_name_of(pipeline),
            catalog_uri=values.get("catalog-uri") or None,
            table=values.get("table") or None,
            properties=passthrough_tables(file_values, env).iceberg,
            routed=values.get("table-template", "{topic}") != "{topic}" or bool(values.get("table-allowed")),
        )
    return LakeTarget(args.output, TableFormat(table_format), pipeline, iceberg)


def _add_lake_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", required=True, help="output directory or URI")
    parser.add_argument("--table-format", choices=[f.value for f in TableFormat],
                        help="parquet (default) or iceberg, as the pipeline was run [env LAMINAR_TABLE_FORMAT]")
    parser.add_argument("--pipeline", help="the pipeline (default 'default'; the default Iceberg namespace)")
    parser.add_argument("--namespace", help="iceberg: the namespace (default: the pipeline)")
    parser.add_argument("--table", help="iceberg: the table (default: the topic, dots and dashes as _)")
    parser.add_argument("--catalog-uri", help="iceberg: sqlite:///<path> or http(s):// (default: "
                                              "<output>/_catalog/catalog.db)")
    parser.add_argument("--table-template", help="iceberg: the pipeline's table-template; other than {topic}, every "
                                                 "table the pipeline committed into is read")
    parser.add_argument("--table-allowed", help="iceberg: the pipeline's table-allowed (set: its tables are routed)")


def add_lake_commands(commands: argparse._SubParsersAction[Parser]) -> None:
    """Register `verify` and `compact`."""

    verify = commands.add_parser("verify", help="audit an output against its topic (exactly once?)", description=(
        "Read the published output (a Parquet tree, or an Iceberg table's current snapshot) and the topic "
        "(read_committed, up to the high watermark) and print per partition: expected, present, missing, "
        "duplicated. Exit 0 only if nothing is missing or duplicated; a published file that is not readable Parquet "
        "(truncated, corrupted) is named on a 'damaged file' line, exit 1."))
    add_common(verify)
    _add_lake_flags(verify)
    add_kafka_client(verify)
    verify.add_argument("--topic", required=True,
                        help="the topic(s) to audit: a name, a comma-separated list, or re:<regex> (every matching topic)")
    verify.add_argument("--timeout", type=float, default=120.0, help="seconds to read the topic (default 120)")
    verify.add_argument("--format", help="a keyed Iceberg table (upsert-keys): the topic's record format its audit "
                                         "replays, json or debezium-json (default: format of --config, "
                                         "LAMINAR_FORMAT, else json)")
    verify.add_argument("--json", action="store_true", help="print JSON instead of a table")
    verify.add_argument("--watch", type=float, default=0.0, metavar="SECONDS",
                        help="audit continuously, a pass every SECONDS, reading only what landed since the last "
                             "(one line per topic per pass; the laminar_audit_* metrics with --metrics-port) until "
                             "SIGTERM or Ctrl-C; exit 0 if the last pass was exact (default 0: one full audit)")
    verify.add_argument("--metrics-port", type=int, default=0, help="with --watch: serve the audit's Prometheus "
                                                                    "metrics on this port (0: off)")
    verify.add_argument("--metrics-address", default="127.0.0.1", help="with --watch: the metrics address "
                                                                        "(default 127.0.0.1)")
    verify.set_defaults(handler=cmd_verify)

    compact = commands.add_parser("compact", help="rewrite small files into large ones beside a running pipeline",
                                  description=__doc__.split("\n\n")[3])
    add_common(compact)
    _add_lake_flags(compact)
    compact.add_argument("--config", metavar="FILE", help="the TOML file `run` takes (its lake settings are used)")
    compact.add_argument("--topic", required=True, action="append",
                         help="a topic whose directories (parquet) or table (iceberg) to compact (repeat for several)")
    compact.add_argument("--target-file-bytes", type=int, default=DEFAULT_TARGET_FILE_BYTES,
                         help="the size of a rewritten file; smaller files are rewritten (default 128 MiB, "
                              "at least 1 MiB)")
    compact.add_argument("--codec", default=Codec.ZSTD.value, choices=[c.value for c in Codec],
                         help="the compression of a rewritten file (default zstd)")
    compact.add_argument("--grace", type=float, default=DEFAULT_GRACE_S, metavar="SECONDS",
                         help="parquet: keep a replaced directory this long for readers holding it open before "
                              f"deleting it (default {DEFAULT_GRACE_S:g}; a one-off run waits for it)")
    compact.add_argument("--expire-after", type=float, default=3600.0,
                         help="iceberg: expire snapshots older than this many seconds (default 3600; 0 = all but "
                              "--retain-last)")
    compact.add_argument("--retain-last", type=int, default=1, help="iceberg: snapshots always kept (default 1)")
    compact.add_argument("--every", type=float, default=0.0, metavar="SECONDS",
                         help="run again every SECONDS until stopped (SIGTERM, Ctrl-C): maintenance beside a "
                              "running pipeline; a failed pass is one line on stderr (default 0: once)")
    compact.add_argument("--json", action="store_true", help="print JSON instead of text")
    compact.set_defaults(handler=cmd_compact)


def cmd_verify(args: argparse.Namespace) -> int:
    from laminar_kafka.cluster.logs import quiet_clients

    configure_command_logging(args, default_level="warning")
    kafka = kafka_client_of(args)
    target = lake_target(args, os.environ)
    with quiet_clients(args.debug):
        return _verify(args, kafka, target)


def _verify(args: argparse.Namespace, kafka: Any, target: LakeTarget) -> int:
    import pyarrow.fs as pafs

    from laminar_kafka.cluster.errors import SinkError, VerifyError
    from laminar_kafka.cluster.lake.parquet.sink import open_output
    from laminar_kafka.cluster.node import topic_partitions
    from laminar_kafka.cluster.ops.lake_state import read_lake_state
    from laminar_kafka.cluster.ops.progress import terminal_progress
    from laminar_kafka.cluster.ops.verify import audit, read_topic
    from laminar_kafka.cluster.ops.verify_lake import read_lake_output
    from laminar_kafka.cluster.ops.verify_upsert import UpsertAudit, keyed_audit

    try:
        fs, root = open_output(args.output)
        kind = fs.get_file_info(root).type
        # a watch may start before the pipeline made its output
        is_directory = kind == pafs.FileType.Directory or (args.watch and kind == pafs.FileType.NotFound)
    except SinkError as exc:
        raise UsageError(str(exc), cause=exc) from exc
    except OSError as exc:
        raise UsageError(f"output {args.output!r} cannot be read: {exc}", cause=exc) from exc
    if not is_directory and target.table_format is TableFormat.PARQUET:
        raise UsageError(f"output {args.output!r} is not a directory")
    topics = sorted({t for t, _ in topic_partitions(kafka, (args.topic,), min(args.timeout, 10.0))})
    if not topics:
        raise UsageError(f"no topic matches {args.topic!r} on {kafka.bootstrap}")
    if args.watch:
        return _watch(args, kafka, target, topics)
    reports = []
    keyed: list[UpsertAudit] = []  # keyed tables (upsert mode): audited against each key's final state
    for topic in topics:
        try:
            audited = (keyed_audit(kafka, topic, target, _record_format(args), args.timeout)
                       if target.table_format is TableFormat.ICEBERG else None)
            if audited is not None:
                keyed.append(audited)
                continue
            with terminal_progress(f"reading {topic}") as progress:
                expected, highs, lows = read_topic(kafka, topic, args.timeout, progress=progress)
            with terminal_progress(f"reading the output of {topic}"):
                scanned = read_lake_output(target, fs, root, topic,
                                           topic_has_records=any(len(o) for o in expected.values()))
        except VerifyError as exc:
            raise UsageError(str(exc), cause=exc) from exc
        reports.append(audit(topic, expected, highs, scanned, lows))
    lake = read_lake_state(target, topics, None)  # the lake's own account: where a lost control state resumes
    if args.json:
        body = reports[0].to_json() if len(reports) == 1 else {"topics": [r.to_json() for r in reports]}
        if keyed:
            body = keyed[0].to_json() if len(keyed) == 1 and not reports else {**body, "keyed": [k.to_json() for k in keyed]}
        print(json.dumps({**body, "lake": lake.to_json()}, indent=2))
    else:
        print("\n\n".join([r.table() for r in reports] + [k.line() for k in keyed]) + "\n" + lake.line())
    return 0 if all(r.ok for r in reports) and all(k.ok for k in keyed) else 1


def _record_format(args: argparse.Namespace) -> str:
    """The topic's record format a keyed table's audit replays it as: ``--format``, else ``format`` of
    ``--config`` or ``LAMINAR_FORMAT``, else json."""
    from laminar_kafka.cluster.config_file import read_config_file

    return str(args.format or os.environ.get("LAMINAR_FORMAT") or read_config_file(getattr(args, "config", None)).get("format") or "json")


def _watch(args: argparse.Namespace, kafka: Any, target: LakeTarget, topics: list[str]) -> int:
    """`verify --watch`: passes every ``--watch`` seconds until SIGTERM/SIGINT; exit 0 if the last pass
    was exact, 1 if not (a pass that cannot read the lake or Kafka is one line on stderr, retried)."""
    import signal
    import sys
    import threading

    from laminar_kafka.cluster.errors import VerifyError
    from laminar_kafka.cluster.ops.audit_watch import AuditMetrics, AuditWatch

    if args.watch < 0.1:
        raise UsageError(f"--watch must be at least 0.1 s, got {args.watch:g}")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    metrics = AuditMetrics()
    stop_metrics = metrics.serve(args.metrics_port, args.metrics_address) if args.metrics_port else None
    watch = AuditWatch(target, kafka, topics, metrics=metrics, timeout_s=args.timeout)
    audits = []
    try:
        while not stop.is_set():
            try:
                audits = watch.run_pass()
            except VerifyError as exc:
                print(f"audit pass failed (retried): {exc}", file=sys.stderr, flush=True)
            else:
                for audit in audits:
                    print(json.dumps({"pass": watch.passes, "topic": audit.topic, "ok": audit.ok, "audited": audit.audited,
                                      "missing": audit.missing, "duplicated": audit.duplicated,
                                      "unexpected": audit.unexpected, "files": len(audit.files),
                                      "marks": {str(p): a.mark for p, a in sorted(audit.partitions.items())},
                                      "full_audits": audit.full_audits})
                          if args.json else f"pass {watch.passes}: {audit.line()}", flush=True)
            stop.wait(args.watch)
    finally:
        if stop_metrics is not None:
            stop_metrics()
    return 0 if audits and all(a.ok for a in audits) else 1


def cmd_compact(args: argparse.Namespace) -> int:
    """`compact`: one pass, or a pass every ``--every`` seconds, until SIGTERM/SIGINT (exit 0: a pass
    ends before its next directory)."""
    configure_command_logging(args)
    settings = _compaction_settings(args)
    if args.every < 0:
        raise UsageError(f"--every must be >= 0, got {args.every:g}")
    args.table_format = _compact_format(args, os.environ).value
    target = lake_target(args, os.environ)
    stop = threading.Event()
    if target.table_format is TableFormat.PARQUET:
        one_pass = _parquet_passes(args, target, settings, stop)
    else:
        one_pass = _iceberg_passes(args, target, settings)
    with _stopped_by_signals(stop):
        if not args.every:
            one_pass()
            return 0
        while not stop.is_set():
            try:
                one_pass()
            except Exception as exc:  # noqa: BLE001 - a catalog or filesystem error: the next pass tries again
                what = str(exc) if isinstance(exc, LaminarError) else f"{type(exc).__name__}: {exc}"
                print(f"compaction pass failed (next in {args.every:g} s): {' '.join(what.split())}",
                      file=sys.stderr, flush=True)
            stop.wait(args.every)
    return 0


def _compaction_settings(args: argparse.Namespace) -> CompactionSettings:
    if args.retain_last < 1 or args.expire_after < 0:
        raise UsageError("--retain-last must be >= 1 and --expire-after >= 0")
    return CompactionSettings(target_file_bytes=args.target_file_bytes, codec=Codec.parse(args.codec),
                              grace_s=args.grace)


def _compact_format(args: argparse.Namespace, env: Mapping[str, str]) -> TableFormat:
    """The table format given (flag, ``LAMINAR_TABLE_FORMAT``, ``--config``), else the one the output
    shows: Iceberg when a catalog is named or the output holds one (``_catalog/``) or a topic's
    table (``<topic>/metadata/``), else Parquet."""
    import logging

    from laminar_kafka.cluster.config import env_name
    from laminar_kafka.cluster.config_file import read_config_file

    file_values = read_config_file(getattr(args, "config", None))

    def given(name: str) -> object:
        return (getattr(args, name.replace("-", "_"), None) or env.get(env_name(name)) or file_values.get(name)
                or file_values.get(name.replace("-", "_")))

    chosen = given("table-format")
    if chosen:
        choices = [f.value for f in TableFormat]
        if chosen not in choices:
            raise UsageError(f"table-format={chosen!r}: expected one of {', '.join(choices)}")
        return TableFormat(chosen)
    reason = ""
    if given("catalog-uri"):
        reason = "a catalog-uri is given"
    elif "://" not in args.output or args.output.startswith("file://"):
        local = args.output[len("file://"):] if args.output.startswith("file://") else args.output
        if os.path.isdir(os.path.join(local, "_catalog")):
            reason = f"{os.path.join(local, '_catalog')} holds an Iceberg catalog"
        for topic in args.topic:
            if not reason and os.path.isdir(os.path.join(local, topic, "metadata")):
                reason = f"{os.path.join(local, topic)} holds an Iceberg table"
    if not reason:
        return TableFormat.PARQUET
    logging.getLogger(__name__).info("table-format not given: %s; compacting it as iceberg", reason)
    return TableFormat.ICEBERG


def _parquet_passes(args: argparse.Namespace, target: LakeTarget, settings: CompactionSettings,
                    stop: threading.Event) -> Callable[[], None]:
    """A pass over the Parquet tree, printing its report. Checks the output first (local, a directory,
    an atomic exchange, no other compaction): :class:`UsageError`. A one-off pass waits ``--grace``
    (unless stopped) and deletes the directories it replaced."""
    import dataclasses

    from laminar_kafka.cluster.lake.parquet.compaction import TreeCompaction, check_local_output
    from laminar_kafka.cluster.lake.parquet.sink import open_output

    check_local_output(target.output)
    try:
        _, root = open_output(target.output)
    except ClusterError as exc:
        raise UsageError(str(exc), cause=exc) from exc
    compaction = TreeCompaction(root, settings, stop=stop)
    compaction.check()
    absent = [topic for topic in args.topic if not os.path.isdir(os.path.join(root, topic))]
    if absent:  # a mistyped topic would compact nothing, pass after pass, and say nothing wrong
        present = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith(("_", ".")))
        raise UsageError(f"no directory for topic(s) {', '.join(absent)} under {root} (topics there: "
                         f"{', '.join(present) or 'none'})")

    def one_pass() -> None:
        report = compaction.run_pass(tuple(args.topic))
        if not args.every and report.leftovers_kept and not stop.wait(settings.grace_s):
            deleted, kept = compaction.clean_leftovers()
            report = dataclasses.replace(report, leftovers_deleted=report.leftovers_deleted + deleted,
                                         leftovers_kept=kept)
        print(json.dumps(report.to_json()) if args.json else "\n".join(report.lines()), flush=True)

    return one_pass


def _iceberg_passes(args: argparse.Namespace, target: LakeTarget, settings: CompactionSettings) -> Callable[[], None]:
    """A pass over the topics' Iceberg tables (compact, then expire), printing its results."""
    from laminar_kafka.cluster.lake.iceberg.tables import open_catalog
    from laminar_kafka.cluster.lake.parquet.sink import open_output

    if target.iceberg is None:
        raise UsageError("compact: an Iceberg lake needs its catalog settings")
    try:
        fs, root = open_output(target.output)
        catalog = open_catalog(target.iceberg, fs, root)
    except ClusterError as exc:
        raise UsageError(str(exc), cause=exc) from exc

    def one_pass() -> None:
        results = [_compact_table(catalog, target, topic, args, settings, fs, root) for topic in args.topic]
        if args.json:
            print(json.dumps(results if len(results) > 1 else results[0], indent=2), flush=True)
        else:
            for result in results:
                swept = f"; change files deleted: {result['change_files_deleted']}" if "change_files_deleted" in result else ""
                print(f"{result['table']}: {result['compact']}; {result['expire']}{swept}", flush=True)

    return one_pass


@contextlib.contextmanager
def _stopped_by_signals(stop: threading.Event) -> Iterator[None]:
    """While the body runs, SIGTERM and SIGINT set ``stop`` (a pass ends before its next directory);
    the previous handlers are restored on the way out."""
    import signal

    previous = {signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _compact_table(catalog: Any, target: LakeTarget, topic: str, args: argparse.Namespace,
                   settings: CompactionSettings, fs: Any, root: str) -> dict[str, object]:
    """Compact, then expire, one topic's table; a keyed (upsert) table's change files left by its
    committed epochs go too (:func:`~laminar_kafka.cluster.lake.iceberg.upsert_commit.sweep_change_files`)."""
    from laminar_kafka.cluster.lake.iceberg.commit import committed_epoch
    from laminar_kafka.cluster.lake.iceberg.maintenance import compact, expire
    from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none
    from laminar_kafka.cluster.lake.iceberg.upsert_commit import sweep_change_files

    assert target.iceberg is not None
    name = (target.iceberg.namespace, target.table_of(topic))
    table = load_table_or_none(catalog, name)
    if table is None:
        raise UsageError(f"table {'.'.join(name)} does not exist in the catalog")
    compacted = compact(table, target_file_bytes=settings.target_file_bytes, codec=settings.codec)
    expired = expire(catalog.load_table(name), older_than=timedelta(seconds=args.expire_after),
                     retain_last=args.retain_last)
    result: dict[str, object] = {"table": ".".join(name), "compact": _as_dict(compacted), "expire": _as_dict(expired)}
    if table.schema().identifier_field_names():  # keyed: its published epoch files are change files, not data
        through = committed_epoch(catalog.load_table(name), target.pipeline)
        result["change_files_deleted"] = sweep_change_files(fs, root, topic, through)
    return result


def _as_dict(report: object) -> dict[str, object]:
    from dataclasses import asdict, is_dataclass

    return asdict(report) if is_dataclass(report) and not isinstance(report, type) else {"result": str(report)}
