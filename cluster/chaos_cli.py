"""`laminar-kafka chaos`: the command line of the chaos campaign (:mod:`cluster.chaos`)."""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from cluster.chaos import CampaignConfig, run_campaign
from cluster.chaos_plan import KINDS, parse_kinds
from cluster.chaos_report import campaign_json, format_table, summarize
from cluster.errors import UsageError

__all__ = ["add_chaos_command", "cmd_chaos"]


def cmd_chaos(args: argparse.Namespace) -> int:
    """The ``chaos`` command: run the campaign, print the table (or JSON), exit 0 iff every run was OK."""
    from cluster.cli import _configure_logging

    _configure_logging(args.debug)
    if not args.debug:
        logging.getLogger().setLevel(logging.WARNING)
    try:
        kinds = parse_kinds(args.kinds)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if args.seeds < 1 or args.nodes < 2 or args.duration_s <= 0 or args.rate < 1 or args.partitions < 1:
        raise UsageError("--seeds >= 1, --nodes >= 2, --duration-s > 0, --rate >= 1 and --partitions >= 1 are required")
    config = CampaignConfig(seeds=args.seeds, seed_start=args.seed_start, duration_s=args.duration_s, kinds=kinds,
                            node_count=args.nodes, rate=args.rate, partitions=args.partitions,
                            kinds_per_run=args.kinds_per_run,
                            max_extras=args.max_extras, workdir=Path(args.workdir) if args.workdir else None,
                            keep=args.keep)
    started = time.monotonic()
    results, base = run_campaign(config)
    rows = summarize(results, KINDS)
    if args.json:
        print(json.dumps(campaign_json(results, rows, time.monotonic() - started), indent=2, default=str))
    else:
        print(format_table(rows, config.recovery_timeout_s))
        failed = [r for r in results if not r.ok]
        for r in failed:
            print(f"seed {r.seed} ({', '.join(r.kinds)}): FAILED"
                  + (f": {r.error}" if r.error else f": {r.missing} missing, {r.duplicated} duplicated, "
                     f"{r.unexpected} unexpected, {r.acked_lost} acknowledged lost, caught up {r.caught_up}")
                  + f"; workdir {r.workdir}")
        print(f"{len(results) - len(failed)}/{len(results)} run(s) exact in {time.monotonic() - started:.0f}s"
              + (f"; campaign directory {base}" if failed or config.workdir else ""))
    return 0 if results and all(r.ok for r in results) else 1


def add_chaos_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``laminar-kafka chaos`` on the CLI's subcommands."""
    chaos = commands.add_parser("chaos", help="a seeded chaos campaign over real processes, audited", description=(
        "For each seed: start Kafka and ZooKeeper, a producer and laminar-kafka nodes, apply the seed's schedule "
        "of faults, stop producing, catch up, audit (0 missing, 0 duplicated), and measure each fault's recovery. "
        "Prints a table per fault kind. Kinds: " + ", ".join(KINDS)))
    chaos.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="verbose logs")
    chaos.add_argument("--seeds", type=int, required=True, help="number of runs (one seed each)")
    chaos.add_argument("--seed-start", type=int, default=0, help="first seed (default 0)")
    chaos.add_argument("--duration-s", type=float, default=40.0,
                       help="seconds of faults per run, at least (default 40)")
    chaos.add_argument("--kinds", help="comma-separated fault kinds (default: all), drawn round-robin over the seeds")
    chaos.add_argument("--kinds-per-run", type=int, default=1, help="round-robin kinds per run (default 1)")
    chaos.add_argument("--max-extras", type=int, default=2, help="random extra kinds per run, at most (default 2)")
    chaos.add_argument("--nodes", type=int, default=3, help="nodes at the start of a run (default 3)")
    chaos.add_argument("--rate", type=int, default=400, help="records per second to produce (default 400)")
    chaos.add_argument("--partitions", type=int, default=6, help="partitions of the first topic (default 6)")
    chaos.add_argument("--workdir", help="campaign directory (default: a temporary one, removed when all runs pass)")
    chaos.add_argument("--keep", action="store_true", help="keep the directories of passing runs too")
    chaos.add_argument("--json", action="store_true", help="print the results as JSON")
    chaos.set_defaults(handler=cmd_chaos)
