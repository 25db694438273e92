"""`laminar-kafka`: run a node, show a pipeline's status, audit an output, run the demo, dev servers.

Exit codes: 0 success; 1 the audit found missing or duplicated rows (``verify``) or a node failed;
2 bad input (a wrong flag, an unreachable broker or ZooKeeper, a missing topic, an unwritable output),
reported as one line on stderr (the stack trace only with ``--debug``). ``status`` answers as a probe
does: 0 healthy, 1 degraded, 3 unreachable (its state unknown; one line), 2 only for a usage error.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from typing import Any, Callable, TypeVar

from laminar_kafka.cli.common import (
    PROG,
    Parser,
    add_common,
    add_kafka_client,
    configure_command_logging,
    kafka_client_of,
)
from laminar_kafka.cli.dev import add_dev_commands
from laminar_kafka.cli.exit_codes import INTERRUPTED, exit_code
from laminar_kafka.cli.lake import add_lake_commands, lake_target
from laminar_kafka.cli.redis import add_redis_commands
from laminar_kafka.cli.tools import add_chaos_command, add_demo_command
from laminar_kafka.cluster.config import SETTING_NAMES, env_name, load_settings
from laminar_kafka.cluster.errors import ClusterError, UsageError
from laminar_kafka.cluster.logs import quiet_clients
from laminar_kafka.cluster.settings_def import NODE_SETTINGS

logger = logging.getLogger(__name__)

__all__ = ["build_parser", "main"]

T = TypeVar("T")


def _version() -> str:
    from laminar_kafka.cluster import __version__

    return __version__


class _VersionAction(argparse.Action):
    """``--version``: the version is looked up only when asked for (``importlib.metadata`` costs
    every process about 20-60 ms of CPU at start, see :mod:`laminar_kafka.coordinator.versioning`)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog} {_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="Land Kafka topics into Parquet exactly once, on a cluster of nodes.")
    add_common(parser, top=True)
    parser.add_argument("--version", action=_VersionAction, help="show the version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{run,status,verify,compact,redis,demo,chaos,dev}",
                                     parser_class=Parser)

    run = commands.add_parser("run", help="run one node", description=(
        "Run one node. Settings come from --config FILE (TOML), then LAMINAR_* environment variables, "
        "then these flags (later wins)."))
    add_common(run)
    run.add_argument("--config", metavar="FILE", help="TOML file with the settings below (same names)")
    for name in SETTING_NAMES:
        setting = NODE_SETTINGS[name]
        run.add_argument(f"--{name}", dest=name.replace("-", "_"), default=None, choices=setting.choices or None,
                         help=f"{setting.help()} [env {env_name(name)}]")
    run.add_argument("--log-file", help="also write logs to this file")
    run.add_argument("--connect-timeout", type=float, default=10.0,
                     help="seconds to wait for Kafka and ZooKeeper at start (default 10)")
    run.set_defaults(handler=cmd_run)

    status = commands.add_parser("status", help="show a pipeline: members, leader, assignment, cursors", description=(
        "Show members, the leader, the assignment version, vnodes and partitions per node, the durable "
        "cursor against the high watermark per partition, and running rounds. The bootstrap servers, "
        "ZooKeeper hosts, state directory and pipeline come from --config FILE, then LAMINAR_* environment "
        "variables, then these flags (later wins), as for run."))
    add_common(status)
    add_kafka_client(status)
    status.add_argument("--topic", help="topic(s), comma-separated, or re:<regex> (default: the pipeline's own, as "
                                        "its first node pinned them)")
    group = status.add_mutually_exclusive_group()
    group.add_argument("--zk", help="ZooKeeper hosts of the pipeline [env LAMINAR_ZK]")
    group.add_argument("--state-dir", help="embedded pipeline: its manifest directory [env LAMINAR_STATE_DIR]")
    status.add_argument("--pipeline", default=None, help="pipeline name (default 'default') [env LAMINAR_PIPELINE]")
    status.add_argument("--source-identity", default=NODE_SETTINGS["source-identity"].default,
                        help=NODE_SETTINGS["source-identity"].help())
    status.add_argument("--output", help="the pipeline's output: also show the lake's latest epoch and cursors "
                                         "and whether they agree with the control state's")
    status.add_argument("--table-format", choices=NODE_SETTINGS["table-format"].choices,
                        help="with --output: parquet (default) or iceberg [env LAMINAR_TABLE_FORMAT]")
    status.add_argument("--namespace", help="with --output, iceberg: the namespace (default: the pipeline)")
    status.add_argument("--catalog-uri", help="with --output, iceberg: the catalog (default: under the output)")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.add_argument("--watch", action="store_true",
                        help="refresh every --interval seconds until Ctrl-C (a live view on a terminal)")
    status.add_argument("--interval", type=float, default=2.0,
                        help="seconds between --watch refreshes and --wait observations (default 2)")
    status.add_argument("--stale-after", type=float, default=10.0,
                        help="seconds without a committed epoch while records wait before the pipeline counts as "
                             "degraded (default 10)")
    status.add_argument("--wait", type=float, default=None, metavar="SECONDS",
                        help="observe every --interval seconds until the pipeline is healthy and caught up (every "
                             "record durable, lag 0; with --output, also every durable record in the lake, so a "
                             "reader of the lake such as verify sees it), at most SECONDS; then print it. Not caught "
                             "up in time: the last verdict (a healthy pipeline still behind is degraded). Before "
                             "verify: status --pipeline orders --output ./lake --wait 120")
    status.epilog = ("Exit codes: 0 healthy; 1 degraded (a member missing, no leader, a round stuck past its "
                     "deadline, durable lag growing, the lake disagreeing); 3 unreachable, the state unknown "
                     "(Kafka, ZooKeeper or the state directory cannot be read, the pipeline or a topic does not "
                     "exist: one line on stderr), as monitoring probes read 3; 2 is a usage error (a wrong flag "
                     "or value), never a verdict. ZooKeeper credentials: LAMINAR_ZK_AUTH or zk-auth in --config.")
    status.set_defaults(handler=cmd_status)

    add_lake_commands(commands)
    add_redis_commands(commands)
    add_demo_command(commands)
    add_chaos_command(commands)
    add_dev_commands(commands)
    return parser


# -- commands ------------------------------------------------------------------------------------


def _stop_before_joining(signum: int, _frame: object) -> None:
    """SIGTERM/SIGINT before the node joined: it owns nothing, so stopping at once is the planned
    leave (run_node replaces this handler with the draining one before it joins)."""
    logging.getLogger(__name__).info("signal %s before joining: stopping", signal.Signals(signum).name)
    raise SystemExit(0)


def _interruptible(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a daemon thread, so a signal handler runs while it blocks in the Kafka or
    ZooKeeper client (Python runs handlers only between bytecodes of the main thread)."""
    values: list[T] = []  # what fn returned, or
    errors: list[BaseException] = []  # what it raised
    done = threading.Event()

    def work() -> None:
        try:
            values.append(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - re-raised on the main thread
            errors.append(exc)
        finally:
            done.set()

    threading.Thread(target=work, name="laminar-preflight", daemon=True).start()
    logger.debug("waiting for %s on a daemon thread (a signal stops the node meanwhile)", getattr(fn, "__name__", fn))
    while not done.wait(0.2):
        pass
    if errors:
        raise errors[0]
    return values[0]


def cmd_run(args: argparse.Namespace) -> int:
    from laminar_kafka.cluster.lake.deadline import LakeCalls, LakeWatchdog
    from laminar_kafka.cluster.node import preflight, run_node

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop_before_joining)
    flags = {name: getattr(args, name.replace("-", "_")) for name in SETTING_NAMES}
    settings = load_settings(args.config, os.environ, flags)
    configure_command_logging(args, args.log_file)
    if args.connect_timeout <= 0:
        raise UsageError(f"--connect-timeout must be positive, got {args.connect_timeout:g}")
    id_origin = ""
    with quiet_clients(args.debug):  # an unreachable Kafka or ZooKeeper is reported in one line
        lake_calls = LakeCalls()  # a silent object store or catalog: one line, exit 1, past lake-io-timeout-ms
        with LakeWatchdog(lake_calls, settings.lake_io_timeout_ms / 1000.0):
            _interruptible(preflight, settings, args.connect_timeout, lake_calls)
        if settings.node_id_auto:
            from laminar_kafka.cluster.auto_node_id import choose_node_id

            choice = _interruptible(choose_node_id, settings, socket.gethostname(), args.connect_timeout)
            settings, id_origin = settings.with_node_id(choice.node_id), choice.origin()
    # Everything imported and set up so far lives as long as the node: moved out of the garbage
    # collector's reach, full collections walk only what the pipeline allocates afterwards.
    gc.freeze()
    return asyncio.run(run_node(settings, id_origin=id_origin))


def status_target(
    flags: Mapping[str, str | None], env: Mapping[str, str], file_values: Mapping[str, object],
) -> tuple[str | None, str | None, str]:
    """(ZooKeeper hosts, state directory, pipeline) of ``status``: each from the config file, then the
    environment (``LAMINAR_ZK``, ``LAMINAR_STATE_DIR``, ``LAMINAR_PIPELINE``), then the flags, later
    wins. ``--state-dir`` wins over ZooKeeper hosts from the file or the environment; otherwise the
    ZooKeeper hosts win over a state directory (a ZooKeeper node with ``node-id auto`` has one too).
    Neither: :class:`UsageError`. Pure."""
    found: dict[str, str | None] = {}
    for setting in ("zk", "state-dir", "pipeline"):
        value: object = flags.get(setting) or env.get(env_name(setting)) or file_values.get(setting) \
            or file_values.get(setting.replace("-", "_"))
        found[setting] = str(value) if value else None
    zk, state_dir = found["zk"], found["state-dir"]
    if flags.get("state-dir"):
        zk = None
    elif zk:
        state_dir = None
    if not zk and not state_dir:
        raise UsageError("status needs the pipeline's ZooKeeper hosts (--zk, LAMINAR_ZK) or, for an embedded "
                         "pipeline, its state directory (--state-dir, LAMINAR_STATE_DIR)")
    return zk, state_dir, found["pipeline"] or "default"


def cmd_status(args: argparse.Namespace) -> int:
    """Exit 0 healthy, 1 degraded, 3 unreachable (see laminar_kafka.cluster.ops.health); --watch: the
    last code. A usage error (a wrong flag, a missing setting) is 2, from :func:`main`."""
    from laminar_kafka.cluster.config import read_config_file
    from laminar_kafka.cluster.ops.health import HealthCode, assess, unreachable
    from laminar_kafka.cluster.ops.status import PipelineStatus, collect_status
    from laminar_kafka.cluster.ops.status_wait import wait_caught_up
    from laminar_kafka.cluster.ops.status_watch import watch
    from laminar_kafka.coordinator.config import ZkCredentials
    from laminar_kafka.errors import ConfigurationError

    configure_command_logging(args, default_level="warning")
    kafka = kafka_client_of(args)
    topics = tuple(t.strip() for t in (args.topic or "").split(",") if t.strip())
    file_values = read_config_file(args.config) if args.config else {}
    zk, state_dir, pipeline = status_target({"zk": args.zk, "state-dir": args.state_dir, "pipeline": args.pipeline},
                                            os.environ, file_values)
    zk_auth = os.environ.get(env_name("zk-auth")) or str(file_values.get("zk-auth") or file_values.get("zk_auth") or "")
    credentials = ZkCredentials.parse(zk_auth) if zk_auth and zk else None
    if args.wait is not None and (args.wait < 0 or args.watch):
        raise UsageError("--wait takes a number of seconds >= 0 and cannot be combined with --watch")

    lake = lake_target(args, os.environ) if args.output else None

    def observe() -> PipelineStatus:
        try:
            return collect_status(kafka=kafka, topics=topics, zk=zk, state_dir=state_dir,
                                  pipeline=pipeline, source_identity=args.source_identity,
                                  credentials=credentials, lake=lake)
        except UsageError:
            raise
        except (ClusterError, ConfigurationError) as exc:  # e.g. a watermark that cannot be read: Kafka unusable
            raise UsageError(str(exc), cause=exc) from exc

    with quiet_clients(args.debug):
        if args.watch:
            return watch(observe, interval=args.interval, as_json=args.json, stale_after=args.stale_after,
                         out=sys.stdout, live=sys.stdout.isatty())
        if args.wait is not None:
            status, health = wait_caught_up(observe, timeout=args.wait, interval=args.interval,
                                            stale_after=args.stale_after)
        else:
            try:
                status = observe()
            except UsageError as exc:
                if args.debug:
                    logger.exception("status could not be read")
                status, health = None, unreachable(str(exc))
            else:
                health = assess(status, stale_after=args.stale_after)
    if status is None:  # unreachable: one line, exit 3 (2 is a usage error's)
        print(f"error: {health.reasons[0]}", file=sys.stderr)
        return int(HealthCode.UNREACHABLE)
    if args.json:
        print(json.dumps({**status.to_json(), "health": health.to_json()}, indent=2))
    else:
        print(status.table() + "\n\n" + health.lines())
    return int(health.code)



def main(argv: Sequence[str] | None = None) -> int:
    """The console script. Returns (and exits with) the exit code: the subcommand's own, or the one
    :func:`~laminar_kafka.cli.exit_codes.exit_code` gives an error of ours that escaped it (one
    line on stderr; with ``--debug`` its traceback too). Any other exception re-raises."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        return int(args.handler(args))
    except (Exception, KeyboardInterrupt) as exc:  # only our own errors become a code; the rest re-raise
        code = exit_code(exc)
        if code is None:
            raise
        if code != INTERRUPTED:
            if debug:  # on stderr itself: the error may come before logging is configured
                traceback.print_exception(exc, file=sys.stderr)
            print(f"error: {exc}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
