"""`laminar-kafka dev up|status|down`: a local Kafka + ZooKeeper for development.

`dev up` starts the servers detached, records them in a state file and prints the addresses and the
time to healthy; `dev status` checks the recorded processes against the process table; `dev down`
stops them and leaves no process behind. A state file left by a crashed `dev up` is detected (its
processes are gone or no longer ours) and cleaned, never trusted blindly.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from cluster import devstack
from cluster.errors import DevStackStateError


def add_dev_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register the `dev` command and its `up`, `status` and `down` subcommands."""
    dev = subparsers.add_parser(
        "dev", help="run a local Kafka (KRaft) and ZooKeeper for development",
        description="Run a local Kafka (KRaft) and ZooKeeper from their Maven Central artifacts.",
    )
    dev.add_argument(
        "--state-file", type=Path, default=None,
        help=f"where the running stack is recorded (default: {devstack.default_state_file()})",
    )
    actions = dev.add_subparsers(dest="dev_command", required=True, metavar="{up,status,down}")
    up = actions.add_parser("up", help="start Kafka and ZooKeeper, print their addresses")
    up.add_argument("--brokers", type=int, choices=(1, 3), default=1, help="Kafka brokers (default 1)")
    up.add_argument("--zookeepers", type=int, choices=(1, 3), default=1, help="ZooKeeper servers (default 1)")
    up.add_argument("--timeout", type=float, default=devstack.DEFAULT_START_TIMEOUT_S, help="seconds to wait for health")
    up.add_argument("--json", action="store_true", help="print the state as JSON")
    up.set_defaults(handler=dev_up)
    status = actions.add_parser("status", help="show the recorded stack and whether each process is alive")
    status.add_argument("--json", action="store_true", help="print the state as JSON")
    status.set_defaults(handler=dev_status)
    down = actions.add_parser("down", help="stop the stack and remove its data")
    down.set_defaults(handler=dev_down)


def _state_file(args: argparse.Namespace) -> Path:
    return args.state_file or devstack.default_state_file()


def _print_stack(state: dict[str, object], as_json: bool) -> None:
    if as_json:
        print(json.dumps(state, indent=2))
        return
    print(f"bootstrap.servers  {state['bootstrap']}")
    print(f"zookeeper          {state['zk_hosts']}")
    print(f"started in         {state['startup_seconds']} s")


def dev_up(args: argparse.Namespace) -> int:
    state_file = _state_file(args)
    try:
        recorded = devstack.read_state(state_file)
    except DevStackStateError as exc:
        print(f"warning: {exc}; discarding it")
        state_file.unlink(missing_ok=True)
        recorded = None
    if recorded is not None:
        if recorded.healthy:
            print("dev stack already running")
            _print_stack({"bootstrap": recorded.bootstrap, "zk_hosts": recorded.zk_hosts,
                          "startup_seconds": recorded.startup_seconds}, args.json)
            return 0
        stopped = devstack.tear_down_recorded(recorded, state_file)
        print(f"cleaned a stale state file from a crashed dev up (stopped: {', '.join(stopped) or 'nothing'})")
    stack = devstack.DevStack.launch(
        kafka_brokers=args.brokers, zookeeper_servers=args.zookeepers, timeout=args.timeout, detach=True
    )
    devstack.write_state(state_file, stack)
    _print_stack(stack.to_state(), args.json)
    return 0


def dev_status(args: argparse.Namespace) -> int:
    """Exit 0 when every recorded process is alive, 1 when some are gone, 3 when nothing is recorded."""
    recorded = devstack.read_state(_state_file(args))
    if recorded is None:
        print("no dev stack recorded")
        return 3
    if args.json:
        print(json.dumps({
            "bootstrap": recorded.bootstrap, "zk_hosts": recorded.zk_hosts, "healthy": recorded.healthy,
            "processes": [{"name": p.name, "pid": p.pid, "port": p.port, "alive": p.alive, "log": p.log}
                          for p in recorded.processes],
        }, indent=2))
    else:
        print(f"bootstrap.servers  {recorded.bootstrap}")
        print(f"zookeeper          {recorded.zk_hosts}")
        for process in recorded.processes:
            print(f"{process.name:<18} pid {process.pid:<8} port {process.port:<6} {'alive' if process.alive else 'GONE'}")
    return 0 if recorded.healthy else 1


def dev_down(args: argparse.Namespace) -> int:
    state_file = _state_file(args)
    try:
        recorded = devstack.read_state(state_file)
    except DevStackStateError as exc:
        print(f"warning: {exc}; removing it")
        state_file.unlink(missing_ok=True)
        return 0
    if recorded is None:
        print("no dev stack recorded")
        return 0
    stopped = devstack.tear_down_recorded(recorded, state_file)
    print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
    return 0
