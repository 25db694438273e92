"""`laminar-kafka demo` and `laminar-kafka chaos`, and the check every dev-tooling command makes first.

The commands import the demo and the campaign inside their handlers, so building the parser loads no
dev module; on a runtime-only install (`pip install laminar-kafka`, without the `dev` extra) they
answer with one line saying what to install (:func:`require_dev_tooling`).
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import time
from collections.abc import Callable
from pathlib import Path

from laminar_kafka.cli.common import Parser, add_common, configure_command_logging
from laminar_kafka.cluster.errors import ClusterError, UsageError
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.settings import TableFormat
from laminar_kafka.errors import ConfigurationError

# What `pip install 'laminar-kafka[dev]'` brings: the dev stack's modules and its extra dependencies.
DEV_TOOLING_MODULES = ("laminar_kafka.devstack", "docker")


def missing_dev_tooling() -> list[str]:
    """The modules of the dev tooling this install lacks (empty when the `dev` extra is installed)."""
    missing = []
    for name in DEV_TOOLING_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError:  # a parent package is missing too
            found = False
        if not found:
            missing.append(name)
    return missing


def require_dev_tooling(command: str) -> None:
    """Raise :class:`UsageError` (one line, exit 2) when `command` cannot run on this install."""
    missing = missing_dev_tooling()
    if missing:
        raise UsageError(f"`laminar-kafka {command}` is dev tooling, not installed here (missing: "
                         f"{', '.join(missing)}): pip install 'laminar-kafka[dev]'")


def dev_tool(command: str, handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """`handler`, after :func:`require_dev_tooling`."""

    @functools.wraps(handler)
    def checked(args: argparse.Namespace) -> int:
        require_dev_tooling(command)
        return handler(args)

    return checked


# --------------------------------------------------------------------------------------------------
# chaos: the seeded chaos campaign (laminar_kafka.chaos.campaign)


def cmd_chaos(args: argparse.Namespace) -> int:
    """The ``chaos`` command: run the campaign, print the table (or JSON), exit 0 iff every run was OK."""
    from laminar_kafka.chaos.campaign import CampaignConfig, run_campaign
    from laminar_kafka.chaos.cdc.report import format_cdc_table
    from laminar_kafka.chaos.kinds import ALL_KINDS, kinds_of_lake, parse_kinds
    from laminar_kafka.chaos.report import campaign_json, format_table, summarize

    configure_command_logging(args, default_level="warning")
    try:
        kinds = parse_kinds(args.kinds, kinds_of_lake(args.lake, args.pipeline))
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    cdc = args.pipeline == "cdc"
    table_format = args.table_format or ("iceberg" if args.lake == "s3-rest" or cdc else "parquet")
    if args.lake == "s3-rest" and table_format != "iceberg":
        raise UsageError("--lake s3-rest lands Iceberg tables through the REST catalog: --table-format iceberg")
    if cdc and table_format != "iceberg":
        raise UsageError("--pipeline cdc upserts into Iceberg tables: --table-format iceberg")
    if cdc and args.keys < args.partitions:
        raise UsageError("--pipeline cdc needs --keys >= --partitions (every partition has keys)")
    try:  # the cdc pipeline's rows are JSON (a payload field is checked record by record)
        PartitionSpec.parse(args.partition_by).check_sources(record_format="json" if cdc else "raw")
    except (ClusterError, ConfigurationError) as exc:
        raise UsageError(f"--partition-by: {exc}") from exc
    if args.seeds < 1 or args.nodes < 2 or args.duration_s <= 0 or args.rate < 1 or args.partitions < 1:
        raise UsageError("--seeds >= 1, --nodes >= 2, --duration-s > 0, --rate >= 1 and --partitions >= 1 are required")
    config = CampaignConfig(seeds=args.seeds, seed_start=args.seed_start, duration_s=args.duration_s, kinds=kinds,
                            node_count=args.nodes, rate=args.rate, partitions=args.partitions,
                            kinds_per_run=args.kinds_per_run,
                            max_extras=args.max_extras, workdir=Path(args.workdir) if args.workdir else None,
                            keep=args.keep, table_format=TableFormat(table_format), lake=args.lake,
                            partition_by=args.partition_by, pipeline=args.pipeline, keys=args.keys)
    started = time.monotonic()
    results, base = run_campaign(config)
    rows = summarize(results, ALL_KINDS)
    if args.json:
        print(json.dumps(campaign_json(results, rows, time.monotonic() - started), indent=2, default=str))
    else:
        print(format_cdc_table(results, kinds_of_lake(args.lake, args.pipeline), config.recovery_timeout_s) if cdc
              else format_table(rows, config.recovery_timeout_s))
        failed = [r for r in results if not r.ok]
        for r in failed:
            print(f"seed {r.seed} ({', '.join(r.kinds)}): FAILED"
                  + (f": {r.error}" if r.error else f": {r.missing} missing, {r.duplicated} duplicated, "
                     f"{r.unexpected} unexpected, {r.acked_lost} acknowledged lost, caught up {r.caught_up}"
                     + (f", {r.undeleted} undeleted, {r.stale} stale" if cdc else ""))
                  + f"; workdir {r.workdir}")
        print(f"{len(results) - len(failed)}/{len(results)} run(s) exact in {time.monotonic() - started:.0f}s"
              + (f"; campaign directory {base}" if failed or config.workdir else ""))
    return 0 if results and all(r.ok for r in results) else 1


def add_chaos_command(commands: argparse._SubParsersAction[Parser]) -> None:
    """Register ``laminar-kafka chaos`` on the CLI's subcommands."""
    from laminar_kafka.chaos.kinds import CDC_KINDS, KINDS, LAKE_KINDS, LAKES, PIPELINES  # pure: for the help text

    chaos = commands.add_parser("chaos", help="a seeded chaos campaign over real processes, audited", description=(
        "For each seed: start Kafka and ZooKeeper, a producer and laminar-kafka nodes, apply the seed's schedule "
        "of faults, stop producing, catch up, audit (0 missing, 0 duplicated), and measure each fault's recovery. "
        "Prints a table per fault kind. Kinds: " + ", ".join(KINDS) + "; with --lake s3-rest (not output-readonly, "
        "output-full) also: " + ", ".join(LAKE_KINDS) + "; with --pipeline cdc also: " + ", ".join(CDC_KINDS)))
    chaos.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="verbose logs")
    chaos.add_argument("--seeds", type=int, required=True, help="number of runs (one seed each)")
    chaos.add_argument("--seed-start", type=int, default=0, help="first seed (default 0)")
    chaos.add_argument("--duration-s", type=float, default=40.0,
                       help="seconds of faults per run, at least (default 40)")
    chaos.add_argument("--kinds", help="comma-separated fault kinds (default: all), drawn round-robin over the seeds")
    chaos.add_argument("--kinds-per-run", type=int, default=1, help="round-robin kinds per run (default 1, raised to ceil(kinds / 20) so 20 seeds draw every kind)")
    chaos.add_argument("--max-extras", type=int, default=2, help="random extra kinds per run, at most (default 2)")
    chaos.add_argument("--nodes", type=int, default=3, help="nodes at the start of a run (default 3)")
    chaos.add_argument("--rate", type=int, default=400, help="records per second to produce (default 400)")
    chaos.add_argument("--partitions", type=int, default=6, help="partitions of the first topic (default 6)")
    chaos.add_argument("--workdir", help="campaign directory (default: a temporary one, removed when all runs pass)")
    chaos.add_argument("--keep", action="store_true", help="keep the directories of passing runs too")
    chaos.add_argument("--json", action="store_true", help="print the results as JSON")
    chaos.add_argument("--table-format", choices=[f.value for f in TableFormat], default=None,
                       help="land into Parquet trees (default with --lake local) or Iceberg tables; the audit reads "
                            "the same")
    chaos.add_argument("--partition-by", default="day",
                       help="the nodes' partition-by (default day); a metadata field spec such as "
                            "'hour(_timestamp),bucket[4](_partition)' runs every fault over the sink's field levels")
    chaos.add_argument("--lake", choices=LAKES, default="local",
                       help="local (default): the nodes share one output directory (Iceberg: a SQLite catalog); "
                            "s3-rest: each node in its own directory, Iceberg tables on SeaweedFS S3 through "
                            "Iceberg's REST catalog, each reached through a fault proxy (adds the kinds "
                            + ", ".join(LAKE_KINDS) + ")")
    chaos.add_argument("--pipeline", choices=PIPELINES, default="append",
                       help="append (default): opaque records, audited offset by offset; cdc: Debezium change "
                            "events of --keys keys upserted into Iceberg tables (--format debezium-json "
                            "--upsert-keys id), audited against every key's final state (adds the kinds "
                            + ", ".join(CDC_KINDS) + "; local lake only)")
    chaos.add_argument("--keys", type=int, default=2000, help="cdc: the keys of a topic (default 2000)")
    chaos.set_defaults(handler=dev_tool("chaos", cmd_chaos))


def add_demo_command(commands: argparse._SubParsersAction[Parser]) -> None:
    """``laminar-kafka demo``."""
    demo = commands.add_parser("demo", help="a local 3-node cluster with a live rebalance and a node kill", description=(
        "From nothing: start Kafka and ZooKeeper, create an 8-partition topic, produce continuously, start 3 "
        "nodes, add a 4th, SIGKILL one, SIGTERM another, stop producing, catch up, and print the verify "
        "report with handoff pauses, recovery time and throughput."))
    add_common(demo)
    demo.add_argument("--workdir", help="keep the demo's files here (default: a temporary directory)")
    demo.add_argument("--rate", type=int, default=5000, help="records per second to produce (default 5000)")
    demo.add_argument("--json", action="store_true", help="print the final report as JSON")
    demo.add_argument("--table-format", choices=[f.value for f in TableFormat], default="parquet",
                      help="land into a Parquet tree (default) or an Iceberg table (embedded SQLite catalog)")
    demo.add_argument("--secure", action="store_true",
                      help="a secured broker (SASL_SSL with SCRAM-SHA-512, TLS from a generated CA): every client uses it")
    demo.set_defaults(handler=dev_tool("demo", cmd_demo))



def cmd_demo(args: argparse.Namespace) -> int:
    from laminar_kafka.demo import run_demo

    configure_command_logging(args, default_level="warning")
    return run_demo(workdir=args.workdir, rate=args.rate, as_json=args.json, secure=args.secure,
                    table_format=TableFormat(args.table_format))


