"""Namespace plumbing for the network fault layer: `ip`, setns(2), and owner records.

Contract: thin, stateless wrappers over the host; no relay, no registry of open networks.

- `run_ip(*args)` runs iproute2's `ip` (NetworkUnavailable when it cannot run, or fails and `check`);
  `list_namespaces`, `list_veths`, `namespace_pids` and `parse_link_names` read its output;
  `wrap_argv` builds the argv that runs a command inside a namespace (`ip netns exec`).
- `in_namespace(namespace, function)` runs `function` in a short-lived thread that entered the
  namespace with setns(2) (e.g. `loopback_listener(port)`: a socket keeps the namespace it was
  made in); no thread of this process stays in the namespace.
- Owner records: /run/laminar-netfaults/<namespace>.json holds the creating process's pid and start
  time (`write_owner`, `read_owner`, `remove_owner`); `owner_alive(record)` tells whether that
  very process (not a reused pid) still runs.

Everything that creates or deletes host state needs root. Depends only on
:mod:`laminar_kafka.devstack.netfaults.model`.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import socket
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any, Callable, TypeVar

from laminar_kafka.devstack.netfaults.model import CONTROL_TIMEOUT_S, NetworkUnavailable

__all__ = ["OWNER_DIR", "in_namespace", "owner_alive", "parse_link_names", "wrap_argv"]

OWNER_DIR = Path("/run/laminar-netfaults")
_CLONE_NEWNET = 0x40000000
_IP_TIMEOUT_S = 20.0

_T = TypeVar("_T")


def ip_path() -> str:
    """The `ip` command to run: on PATH, or in the usual sbin and bin folders (root's PATH may lack them)."""
    return shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin:/usr/bin:/bin") or "ip"


def run_ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`ip *args`, bounded; raises NetworkUnavailable when it cannot run, or (``check``) when it fails."""
    command = [ip_path(), *args]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=_IP_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetworkUnavailable(f"`ip {' '.join(args)}` could not run: {exc}", cause=exc) from exc
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise NetworkUnavailable(f"`ip {' '.join(args)}` failed: {detail[0] if detail else f'exit {result.returncode}'}")
    return result


def wrap_argv(namespace: str, argv: list[str], ip: str | None = None) -> list[str]:
    """The argv that runs `argv` inside `namespace` (`ip netns exec`, which execs: same pid)."""
    if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError("argv must be a non-empty list of strings")
    return [ip or ip_path(), "netns", "exec", namespace, *argv]


def list_namespaces() -> list[str]:
    """The names of the network namespaces (`ip netns list`; [] when it fails)."""
    result = run_ip("netns", "list", check=False)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def list_veths() -> list[str]:
    """The names of the veth interfaces of this namespace ([] when `ip` fails)."""
    result = run_ip("-o", "link", "show", "type", "veth", check=False)
    return parse_link_names(result.stdout)


def parse_link_names(output: str) -> list[str]:
    """Interface names from `ip -o link show` output (`12: lk-1-n1@if11: <...> ...`)."""
    names: list[str] = []
    for line in output.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2 and parts[0].strip().isdigit():
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def namespace_pids(namespace: str) -> list[int]:
    """The pids of the processes inside ``namespace`` ([] when `ip` fails)."""
    result = run_ip("netns", "pids", namespace, check=False)
    return [int(token) for token in result.stdout.split() if token.isdigit()]


def libc_setns() -> Callable[[int, int], int] | None:
    """libc's setns(2), or None where it cannot be loaded."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.setns
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


def in_namespace(namespace: str, function: Callable[[], _T]) -> _T:
    """Run `function` in a fresh thread that has entered `namespace` (the thread then ends, so no
    thread of this process stays in the namespace) and return its result (or raise its exception).
    Raises NetworkUnavailable when setns(2) is not available or entering the namespace fails."""
    setns = libc_setns()
    if setns is None:
        raise NetworkUnavailable("setns(2) is not available from libc")
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if setns(fd, _CLONE_NEWNET) != 0:
                    error = ctypes.get_errno()
                    raise OSError(error, f"setns into {namespace}: {os.strerror(error)}")
            finally:
                os.close(fd)
            outcome["value"] = function()
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name=f"netfaults-setns-{namespace}", daemon=True)
    thread.start()
    thread.join(CONTROL_TIMEOUT_S)
    if "error" in outcome:
        raise outcome["error"]
    if "value" not in outcome:
        raise NetworkUnavailable(f"entering namespace {namespace} did not finish")
    return outcome["value"]


def loopback_listener(port: int) -> socket.socket:
    """A TCP socket listening on 127.0.0.1:``port`` of the calling thread's network namespace."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(1024)
    except OSError:
        listener.close()
        raise
    return listener


# ---- owner records (which process made a namespace), for cleanup after a crash ----


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (its /proc stat's field 22), which tells a reused pid
    apart; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(") ", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _owner_path(namespace: str) -> Path:
    return OWNER_DIR / f"{namespace}.json"


def write_owner(namespace: str, interface: str, index: int) -> None:
    """Record this process as the owner of ``namespace`` (its interface and network index) under :data:`OWNER_DIR`."""
    OWNER_DIR.mkdir(parents=True, exist_ok=True)
    record = {"pid": os.getpid(), "start": process_start(os.getpid()), "interface": interface, "index": index}
    temporary = _owner_path(namespace).with_suffix(f".{uuid.uuid4().hex[:6]}.tmp")
    temporary.write_text(json.dumps(record))
    temporary.replace(_owner_path(namespace))


def read_owner(namespace: str) -> dict[str, Any] | None:
    """The owner record of ``namespace`` (see :func:`write_owner`), or None when there is none or it is unreadable."""
    try:
        record = json.loads(_owner_path(namespace).read_text())
        return record if isinstance(record, dict) else None
    except (OSError, ValueError):
        return None


def owner_alive(record: dict[str, Any] | None) -> bool:
    """Whether the process named by an owner record still runs (same pid AND same start time)."""
    if not record:
        return False
    try:
        pid = int(record["pid"])
    except (KeyError, TypeError, ValueError):
        return False
    start = process_start(pid)
    return start is not None and start == record.get("start")


def remove_owner(namespace: str) -> None:
    """Remove the owner record of ``namespace``, if any."""
    with contextlib.suppress(OSError):
        _owner_path(namespace).unlink()
