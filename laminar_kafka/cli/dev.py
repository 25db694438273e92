"""`laminar-kafka dev up|status|down`: a local Kafka, ZooKeeper and object store for development.

They drive the `devstack` package, imported inside the command functions only, so the runtime's
commands never load the dev tooling; a runtime-only install (`pip install laminar-kafka`, without the
`dev` extra) answers them with one line saying what to install (:func:`laminar_kafka.cli.tools.require_dev_tooling`).

`dev`: a local Kafka + ZooKeeper for development.

`dev up` starts the servers detached, records them in a state file and prints the addresses and the
time to healthy; `dev up --exports` prints them as shell ``export`` lines instead
(``LAMINAR_BOOTSTRAP``, ``LAMINAR_ZK``, which `run`, `status` and `verify` read), for
``eval "$(laminar-kafka dev up --exports)"``; `dev status` checks the recorded processes against the
process table; `dev produce` creates a topic and produces to it (:mod:`laminar_kafka.cli.dev_produce`);
`dev down` stops them and leaves no process behind. A state file left by a crashed `dev up` is detected (its
processes are gone or no longer ours) and cleaned, never trusted blindly.

`dev up --containers` is the container variant: Kafka and ZooKeeper containers of the project's
images (`python -m laminar_kafka.devstack.containers build`) on any engine answering the Docker API, published on
127.0.0.1 and recorded in `<state file>.containers.json`; `dev status` and `dev down` handle both
kinds. Containers are found by their stack label, so a lost state file leaves nothing unmanaged.

`dev up --secure` adds SASL_SSL (SCRAM-SHA-512) and mTLS listeners to Kafka, with TLS material
generated for this stack; it prints the client settings as a TOML `[kafka]` table without the
password, which is only in the file it names (`<stack>/client.toml`, mode 0600).

`dev up --s3` adds SeaweedFS (`laminar_kafka.devstack.objectstore.seaweedfs`): an S3 endpoint with the
bucket `laminar-dev` and an Iceberg REST catalog, recorded in `<state file>.s3.json`; it prints the
`AWS_*` variables as `export` lines and the catalog URI with the `[iceberg]` properties it needs
(in `--json`: under `"s3"`). `dev status` shows it, `dev down` stops it and removes its data.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laminar_kafka.cli.common import Parser
from laminar_kafka.cli.dev_produce import add_produce_command
from laminar_kafka.cli.tools import dev_tool
from laminar_kafka.cluster.errors import UsageError

if TYPE_CHECKING:
    from laminar_kafka.devstack.objectstore.seaweedfs import SeaweedServer
    from laminar_kafka.devstack.stack import RecordedStack

__all__ = ["add_dev_commands", "shell_exports"]

CONTAINER_STACK = "laminar-dev"


def add_dev_commands(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register the `dev` command and its `up`, `status`, `produce` and `down` subcommands (no dev
    module is imported to build them: `run --help` works on a runtime-only install)."""
    dev = subparsers.add_parser(
        "dev", help="run a local Kafka (KRaft) and ZooKeeper for development",
        description="Run a local Kafka (KRaft) and ZooKeeper from their Maven Central artifacts.",
    )
    dev.add_argument(
        "--state-file", type=Path, default=None,
        help="where the running stack is recorded (default: devstack/state.json in the laminar-kafka cache "
             "directory, ~/.cache/laminar-kafka unless LAMINAR_CACHE_DIR says otherwise)",
    )
    actions = dev.add_subparsers(dest="dev_command", required=True, metavar="{up,status,produce,down}")
    up = actions.add_parser("up", help="start Kafka and ZooKeeper, print their addresses")
    up.add_argument("--brokers", type=int, choices=(1, 3), default=1, help="Kafka brokers (default 1)")
    up.add_argument("--zookeepers", type=int, choices=(1, 3), default=1, help="ZooKeeper servers (default 1)")
    up.add_argument("--timeout", type=float, default=None, help="seconds to wait for health (default 90)")
    shown = up.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print the state as JSON")
    shown.add_argument("--exports", action="store_true",
                       help="print only shell export lines (LAMINAR_BOOTSTRAP, LAMINAR_ZK; with --s3 the AWS_* "
                            "variables): eval \"$(laminar-kafka dev up --exports)\"")
    up.add_argument("--containers", action="store_true",
                    help="run Kafka and ZooKeeper as containers of the project's images (one broker, one server)")
    up.add_argument("--secure", action="store_true",
                    help="also listen with SASL_SSL (SCRAM-SHA-512) and mTLS; writes the client settings to "
                         "<stack>/client.toml and client-mtls.toml")
    up.add_argument("--s3", action="store_true",
                    help="also run SeaweedFS on 127.0.0.1: an S3 endpoint with the bucket laminar-dev and an "
                         "Iceberg REST catalog; prints the AWS_* variables and the catalog URI")
    up.set_defaults(handler=dev_tool("dev up", dev_up))
    status = actions.add_parser("status", help="show the recorded stack and whether each process is alive")
    status_shown = status.add_mutually_exclusive_group()
    status_shown.add_argument("--json", action="store_true", help="print the state as JSON")
    status_shown.add_argument("--exports", action="store_true",
                              help="print only the shell export lines of the running stack, as dev up --exports")
    status.set_defaults(handler=dev_tool("dev status", dev_status))
    add_produce_command(actions)
    down = actions.add_parser("down", help="stop the stack and remove its data (processes and containers)")
    down.add_argument("--containers", action="store_true",
                      help="also remove the container stack's containers when its state file is lost")
    down.set_defaults(handler=dev_tool("dev down", dev_down))


def _state_file(args: argparse.Namespace) -> Path:
    from laminar_kafka.devstack.stack import default_state_file

    return args.state_file or default_state_file()


def shell_exports(bootstrap: str, zk_hosts: str, extra: Mapping[str, str] | None = None) -> str:
    """The ``export`` lines of a stack, quoted for a POSIX shell: ``LAMINAR_BOOTSTRAP``, ``LAMINAR_ZK``
    (the settings `run`, `status` and `verify` read from the environment), then ``extra`` (SeaweedFS's
    ``AWS_*``). Pure."""
    values = {"LAMINAR_BOOTSTRAP": bootstrap, "LAMINAR_ZK": zk_hosts, **(extra or {})}
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in values.items())


def _print_stack(state: dict[str, object], as_json: bool) -> None:
    if as_json:
        print(json.dumps(state, indent=2))
        return
    secure = state.get("secure")
    print(f"bootstrap.servers  {state['bootstrap']}" + ("  (PLAINTEXT)" if secure else ""))
    print(f"zookeeper          {state['zk_hosts']}")
    print(f"started in         {state['startup_seconds']} s")
    if isinstance(secure, dict):
        _print_secure(secure)


def _print_secure(secure: dict[str, str]) -> None:
    """The secured listeners and the `[kafka]` table of client.toml, its secrets left out."""
    import tomllib

    from laminar_kafka.devstack.security import client_toml

    print(f"SASL_SSL           {secure['sasl_ssl_bootstrap']}  (SCRAM-SHA-512, user {secure['sasl_username']})")
    print(f"SSL (mTLS)         {secure['ssl_bootstrap']}  (client certificate required)")
    print(f"client config      {secure['client_config']}  (holds the password; mode 0600)")
    print(f"mTLS client config {secure['mtls_client_config']}")
    try:
        document = tomllib.loads(Path(secure["client_config"]).read_text())
        properties = {str(k): str(v) for k, v in document["kafka"].items()}
    except (OSError, KeyError, ValueError) as exc:
        print(f"(cannot read {secure['client_config']}: {exc})")
        return
    print(f"\n# laminar-kafka run|status|verify --config {secure['client_config']} ..., or in your own config:")
    print(client_toml(properties, bootstrap=str(document.get("bootstrap", "")), hide_secrets=True), end="")


def _containers_state_file(args: argparse.Namespace) -> Path:
    state_file = _state_file(args)
    return state_file.with_name(f"{state_file.stem}.containers.json")


def _stack_name(args: argparse.Namespace) -> str:
    """One container stack per state file: the default one is `laminar-dev`."""
    if args.state_file is None:
        return CONTAINER_STACK
    import hashlib

    return f"{CONTAINER_STACK}-{hashlib.sha256(str(args.state_file.resolve()).encode()).hexdigest()[:8]}"


def _container_states(client: Any, name: str) -> list[dict[str, object]]:
    from laminar_kafka.devstack.containers.servers import stack_containers

    return [{"name": c.name, "id": c.id[:12], "status": c.status,
             "ports": [f"{b['HostIp']}:{b['HostPort']}" for bs in (c.ports or {}).values() for b in (bs or [])]}
            for c in stack_containers(client, name)]


def dev_up_containers(args: argparse.Namespace) -> int:
    from laminar_kafka.devstack.containers import engine as containers
    from laminar_kafka.devstack.containers.servers import ContainerStack, remove_stack

    if args.brokers != 1 or args.zookeepers != 1:
        print("dev up --containers runs one broker and one ZooKeeper server")
        return 2
    state_file = _containers_state_file(args)
    name = _stack_name(args)
    try:
        client = containers.connect()
        containers.check_container_runs(client)
    except containers.ContainerError as exc:
        print(f"containers: {exc}")
        return 2
    running = _container_states(client, name)
    if running and state_file.exists() and all(c["status"] == "running" for c in running):
        state = json.loads(state_file.read_text())
        print("dev stack (containers) already running", file=sys.stderr if args.exports else sys.stdout)
        _print_stack_or_exports(state, args)
        return 0
    if running or state_file.exists():
        removed = remove_stack(client, name)
        state_file.unlink(missing_ok=True)
        print(f"cleaned a stale container stack (removed: {', '.join(removed) or 'nothing'})", file=sys.stderr)
    try:
        stack = ContainerStack.launch(client, name, timeout=args.timeout)
    except containers.ContainerError as exc:
        print(f"containers: {exc}")
        return 2
    state_file.parent.mkdir(parents=True, exist_ok=True)
    temporary = state_file.with_suffix(".tmp")
    temporary.write_text(json.dumps(stack.to_state(), indent=2))
    temporary.replace(state_file)
    _print_stack_or_exports(stack.to_state(), args)
    return 0


def _print_stack_or_exports(state: dict[str, object], args: argparse.Namespace) -> None:
    if getattr(args, "exports", False):
        print(shell_exports(str(state["bootstrap"]), str(state["zk_hosts"])), end="")
    else:
        _print_stack(state, args.json)


def _containers_status(args: argparse.Namespace) -> tuple[dict[str, Any], bool] | None:
    """(state with each container's status, healthy) of the recorded container stack (its JSON), or None."""
    state_file = _containers_state_file(args)
    if not state_file.exists():
        return None
    from laminar_kafka.devstack.containers import engine as containers

    state = json.loads(state_file.read_text())
    try:
        live = {c["name"]: c for c in _container_states(containers.connect(), str(state["stack"]))}
    except containers.ContainerError as exc:
        live = {}
        state["engine"] = str(exc)
    for recorded in state["containers"]:
        recorded["status"] = live.get(recorded["name"], {}).get("status", "gone")
    return state, all(c["status"] == "running" for c in state["containers"])


def _containers_down(args: argparse.Namespace) -> list[str]:
    state_file = _containers_state_file(args)
    from laminar_kafka.devstack.containers import engine as containers
    from laminar_kafka.devstack.containers.servers import remove_stack

    name = _stack_name(args)
    if state_file.exists():
        name = str(json.loads(state_file.read_text()).get("stack", name))
    try:
        removed = remove_stack(containers.connect(start=False), name)
    except containers.ContainerError:
        removed = []  # no engine: no container can be left
    state_file.unlink(missing_ok=True)
    return removed


def dev_up(args: argparse.Namespace) -> int:
    from laminar_kafka.devstack.jvm.servers import DEFAULT_START_TIMEOUT_S

    if getattr(args, "timeout", None) is None:
        args.timeout = DEFAULT_START_TIMEOUT_S
    if getattr(args, "containers", False):
        if getattr(args, "secure", False) or getattr(args, "s3", False):
            raise UsageError("dev up --secure and --s3 run local processes; they cannot be combined with --containers")
        return dev_up_containers(args)
    from laminar_kafka.devstack.errors import DevStackStateError
    from laminar_kafka.devstack.stack import DevStack, read_state, tear_down_recorded, write_state

    state_file = _state_file(args)
    try:
        recorded = read_state(state_file)
    except DevStackStateError as exc:
        print(f"warning: {exc}; discarding it", file=sys.stderr)
        state_file.unlink(missing_ok=True)
        recorded = None
    secure = bool(getattr(args, "secure", False))
    if recorded is not None:
        if recorded.healthy and (recorded.secure is not None or not secure):
            if not args.json:  # stderr: the --exports lines on stdout stay shell
                print("dev stack already running", file=sys.stderr)
            state: dict[str, object] = {"bootstrap": recorded.bootstrap, "zk_hosts": recorded.zk_hosts,
                                        "startup_seconds": recorded.startup_seconds, "already_running": True,
                                        "secure": dict(recorded.secure) if recorded.secure else None}
            _print_stack_and_s3(state, state_file, args)
            return 0
        if recorded.healthy:
            print("a dev stack without --secure is running; stop it first (laminar-kafka dev down)")
            return 2
        stopped = tear_down_recorded(recorded, state_file)
        print(f"cleaned a stale state file from a crashed dev up (stopped: {', '.join(stopped) or 'nothing'})", file=sys.stderr)
    from laminar_kafka.cluster.ops.progress import terminal_progress

    with terminal_progress("starting Kafka and ZooKeeper"):
        stack = DevStack.launch(
            kafka_brokers=args.brokers, zookeeper_servers=args.zookeepers, timeout=args.timeout, detach=True,
            secure=secure,
        )
    write_state(state_file, stack)
    _print_stack_and_s3(stack.to_state(), state_file, args)
    return 0


def _print_stack_and_s3(state: dict[str, object], state_file: Path, args: argparse.Namespace) -> None:
    """Print the stack, and with ``--s3`` start (or find) SeaweedFS first: one JSON document with
    ``--json``, else the stack's lines then SeaweedFS's."""
    server = _s3_up(state_file) if getattr(args, "s3", False) else None
    if getattr(args, "exports", False):
        print(shell_exports(str(state["bootstrap"]), str(state["zk_hosts"]),
                            server.env() if server is not None else None), end="")
        return
    if args.json:
        print(json.dumps({**state, "s3": _s3_state(server)} if server is not None else state, indent=2))
        return
    _print_stack(state, as_json=False)
    if server is not None:
        _print_s3(server)


def _s3_up(state_file: Path) -> SeaweedServer:
    """``dev up --s3``: the recorded SeaweedFS when it still runs, else a new one (recorded). A record
    whose server is gone is stopped (its sockets) and its data removed first."""
    from laminar_kafka.devstack.objectstore.seaweedfs import (
        record_dev_server,
        recorded_dev_server,
        start_for_dev,
        stop_dev_server,
    )

    server = recorded_dev_server(state_file)
    if server is not None and server.running():
        return server
    stop_dev_server(state_file)
    server = start_for_dev(state_file.parent / f"{state_file.stem}-s3")
    record_dev_server(server, state_file)
    return server


def _s3_state(server: SeaweedServer) -> dict[str, object]:
    """What ``--json`` shows of SeaweedFS: the endpoint, the bucket, the environment, the catalog and
    its ``[iceberg]`` properties (the development credentials: loopback only)."""
    from laminar_kafka.devstack.objectstore.seaweedfs import DEV_BUCKET

    return {"endpoint": server.endpoint, "bucket": DEV_BUCKET, "env": server.env(),
            "catalog_uri": server.catalog_uri, "iceberg": server.catalog_properties(),
            "pid": server.pid, "log": str(server.log_path), "running": server.running()}


def _print_s3(server: SeaweedServer) -> None:
    """SeaweedFS as shell lines: the ``AWS_*`` exports, then the catalog URI and its ``[iceberg]``
    properties as a comment (a REST catalog SeaweedFS serves: tables live in its table bucket)."""
    from laminar_kafka.devstack.objectstore.seaweedfs import DEV_BUCKET

    properties = server.catalog_properties()
    print(f"s3 (SeaweedFS)     {server.endpoint}  bucket {DEV_BUCKET}  (output = \"s3://{DEV_BUCKET}/<prefix>\")")
    print(f"iceberg catalog    {server.catalog_uri}  (REST; table bucket {properties['warehouse']})")
    print("".join(f"export {name}={value}\n" for name, value in server.env().items()), end="")
    print(f"# iceberg catalog: catalog-uri = \"{server.catalog_uri}\"; [iceberg] "
          + ", ".join(f"{name} = \"{value}\"" for name, value in properties.items()))


def dev_status(args: argparse.Namespace) -> int:
    """Exit 0 when every recorded process (or container) is alive, 1 when some are gone, 3 when
    nothing is recorded."""
    from laminar_kafka.devstack.stack import read_state

    recorded = read_state(_state_file(args))
    containers_state = _containers_status(args)
    if containers_state is not None:
        state, healthy = containers_state
        if getattr(args, "exports", False):
            print(shell_exports(str(state["bootstrap"]), str(state["zk_hosts"])), end="")
            return 0 if healthy else 1
        if args.json:
            print(json.dumps({**state, "healthy": healthy}, indent=2))
        else:
            print(f"containers         bootstrap.servers {state['bootstrap']}  zookeeper {state['zk_hosts']}")
            for container in state["containers"]:
                print(f"{container['name']:<18} port {container['port']:<6} {container['status']}")
        if recorded is None:
            return 0 if healthy else 1
        if not healthy:
            dev_status_processes(args, recorded)
            return 1
    if recorded is None:
        print("no dev stack recorded", file=sys.stderr if getattr(args, "exports", False) else sys.stdout)
        return 3
    return dev_status_processes(args, recorded)


def dev_status_processes(args: argparse.Namespace, recorded: RecordedStack) -> int:
    """The recorded processes (and SeaweedFS when ``dev up --s3`` recorded it): exit 0 when all live."""
    from laminar_kafka.devstack.objectstore.seaweedfs import recorded_dev_server

    s3 = recorded_dev_server(_state_file(args))
    if getattr(args, "exports", False):
        print(shell_exports(recorded.bootstrap, recorded.zk_hosts, s3.env() if s3 is not None else None), end="")
    elif args.json:
        print(json.dumps({
            "bootstrap": recorded.bootstrap, "zk_hosts": recorded.zk_hosts, "healthy": recorded.healthy,
            "secure": dict(recorded.secure) if recorded.secure else None,
            "processes": [{"name": p.name, "pid": p.pid, "port": p.port, "alive": p.alive, "log": p.log}
                          for p in recorded.processes],
            "s3": _s3_state(s3) if s3 is not None else None,
        }, indent=2))
    else:
        print(f"bootstrap.servers  {recorded.bootstrap}")
        print(f"zookeeper          {recorded.zk_hosts}")
        if recorded.secure:
            print(f"SASL_SSL           {recorded.secure['sasl_ssl_bootstrap']}  config {recorded.secure['client_config']}")
            print(f"SSL (mTLS)         {recorded.secure['ssl_bootstrap']}  config {recorded.secure['mtls_client_config']}")
        for process in recorded.processes:
            print(f"{process.name:<18} pid {process.pid:<8} port {process.port:<6} {'alive' if process.alive else 'GONE'}")
        if s3 is not None:
            alive = "alive" if s3.running() else "GONE"
            print(f"{'s3 (SeaweedFS)':<18} pid {s3.pid:<8} port {s3.port:<6} {alive}  catalog {s3.catalog_uri}")
    return 0 if recorded.healthy and (s3 is None or s3.running()) else 1


def dev_down(args: argparse.Namespace) -> int:
    """Stop what `dev up` recorded (processes, containers, SeaweedFS) and remove its data."""
    from laminar_kafka.devstack.objectstore.seaweedfs import stop_dev_server

    state_file = _state_file(args)
    object_store = ["s3 (SeaweedFS)"] if stop_dev_server(state_file) else []
    if _containers_state_file(args).exists() or getattr(args, "containers", False):
        removed = _containers_down(args)
        print(f"removed containers: {', '.join(removed) or 'none were left'}")
        if not state_file.exists():
            if object_store:
                print(f"stopped: {', '.join(object_store)}")
            return 0
    from laminar_kafka.devstack.errors import DevStackStateError
    from laminar_kafka.devstack.stack import read_state, tear_down_recorded

    try:
        recorded = read_state(state_file)
    except DevStackStateError as exc:
        print(f"warning: {exc}; removing it", file=sys.stderr)
        state_file.unlink(missing_ok=True)
        return 0
    if recorded is None:
        print(f"stopped: {', '.join(object_store)}" if object_store else "no dev stack recorded")
        return 0
    stopped = tear_down_recorded(recorded, state_file) + object_store
    print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
    return 0
