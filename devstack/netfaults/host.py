"""Host-wide operations of the network fault layer: can it work here, what is stale, what is free.

Contract:

- `network_faults_available()`: (True, "") when namespaces, veth pairs and setns(2) work here
  (checked by making and deleting a probe namespace and veth), else (False, one-line reason).
- `cleanup_stale(prefix, force, kill_processes)`: deletes `<prefix>*` namespaces, host veths and
  owner records whose owner process is gone, sparing live networks of this process (`OPEN`),
  namespaces of other live owners, and running probes (unless `force`). Returns what it removed;
  returns [] without root or `ip`.
- `used_indexes()` / `unused_index(start)`: the 10.231.<i>.0/30 subnets taken on this host or by
  this process, and the first free one (racy across processes; `NodeNetwork.start()` refuses a
  clash rather than share a subnet).

Builds on :mod:`laminar_kafka.devstack.netfaults.model`, :mod:`laminar_kafka.devstack.netfaults.namespaces` and the registry of open
networks in :mod:`laminar_kafka.devstack.netfaults.node`.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import sys
import uuid
from pathlib import Path

from laminar_kafka.devstack.netfaults.model import (
    DEFAULT_PREFIX,
    IFNAME_MAX,
    INNER_INTERFACE,
    MAX_INDEX,
    SUBNET_BASE,
    NetworkUnavailable,
    check_index,
)
from laminar_kafka.devstack.netfaults.namespaces import (
    OWNER_DIR,
    in_namespace,
    ip_path,
    libc_setns,
    list_namespaces,
    list_veths,
    loopback_listener,
    namespace_pids,
    owner_alive,
    read_owner,
    remove_owner,
    run_ip,
)
from laminar_kafka.devstack.netfaults.node import OPEN
from laminar_kafka.devstack.processes import pid_alive

logger = logging.getLogger("laminar_kafka.devstack.netfaults.faults")  # the whole layer logs under its entry point's name


def network_faults_available() -> tuple[bool, str]:
    """(True, "") when namespaces, veth pairs and setns work here; else (False, one-line reason)."""
    if not sys.platform.startswith("linux"):
        return False, f"network namespaces need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return False, f"network namespaces need root (running as uid {os.geteuid()})"
    if shutil.which("ip") is None and not Path(ip_path()).is_file():
        return False, "the `ip` command is missing (Debian package iproute2)"
    if libc_setns() is None:
        return False, "setns(2) is not available from libc"
    probe = f"{DEFAULT_PREFIX}probe-{os.getpid()}-{uuid.uuid4().hex[:4]}"
    interface = f"{DEFAULT_PREFIX}p{os.getpid()}-{uuid.uuid4().hex[:2]}"[:IFNAME_MAX]
    try:
        run_ip("netns", "add", probe)
        run_ip("-n", probe, "link", "set", "lo", "up")
        run_ip("link", "add", interface, "type", "veth", "peer", "name", INNER_INTERFACE, "netns", probe)
        in_namespace(probe, lambda: loopback_listener(0).close())
    except (NetworkUnavailable, OSError) as exc:
        return False, f"network namespaces do not work here: {exc}"
    finally:
        run_ip("link", "del", interface, check=False)
        run_ip("netns", "del", probe, check=False)
    return True, ""


def cleanup_stale(prefix: str = DEFAULT_PREFIX, force: bool = False, kill_processes: bool = False) -> list[str]:
    """Delete namespaces `<prefix>*` and host veths `<prefix>*` left by a run that is gone.

    A namespace whose owner process still runs (another campaign, another test) is kept unless
    `force`. Processes still inside a removed namespace (nodes of a killed campaign) are left
    running, cut off from every server, unless `kill_processes` (SIGKILL). Returns the names
    removed (namespaces and interfaces). Never raises for a missing `ip` or a non-root user: then
    there is nothing it could have made, and it returns [].
    """
    if os.geteuid() != 0 or shutil.which("ip") is None and not Path(ip_path()).is_file():
        return []
    removed: list[str] = []
    keep_interfaces: set[str] = set()
    live = {network.namespace for network in list(OPEN)}
    for namespace in list_namespaces():
        if not namespace.startswith(prefix):
            continue
        record = read_owner(namespace)
        probing = probe_pid(namespace, prefix)
        if not force and (
            namespace in live
            or (owner_alive(record) and record is not None and record.get("pid") != os.getpid())
            or (probing is not None and pid_alive(probing))
        ):
            if record and record.get("interface"):
                keep_interfaces.add(str(record["interface"]))
            continue
        pids = namespace_pids(namespace)
        if pids and kill_processes:
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            logger.warning("killed processes %s left in stale namespace %s", pids, namespace)
        elif pids:
            logger.warning("stale namespace %s still holds processes %s (left running)", namespace, pids)
        if record and record.get("interface"):
            if run_ip("link", "del", str(record["interface"]), check=False).returncode == 0:
                removed.append(str(record["interface"]))
        run_ip("netns", "del", namespace, check=False)
        remove_owner(namespace)
        removed.append(namespace)
    for interface in list_veths():
        if interface.startswith(prefix) and interface not in keep_interfaces and interface not in removed:
            probing = probe_pid(interface, prefix)
            if not force and (
                any(n.host_interface == interface for n in list(OPEN))
                or (probing is not None and pid_alive(probing))
            ):
                continue
            if run_ip("link", "del", interface, check=False).returncode == 0:
                removed.append(interface)
    with contextlib.suppress(OSError):
        for path in OWNER_DIR.glob(f"{prefix}*.json"):
            namespace = path.name[: -len(".json")]
            if not owner_alive(read_owner(namespace)) and namespace not in list_namespaces():
                path.unlink()
    if removed:
        logger.info("removed stale network state: %s", ", ".join(removed))
    return removed


def probe_pid(name: str, prefix: str) -> int | None:
    """The pid in the name of a namespace or veth made by `network_faults_available()`, if it is one."""
    match = re.match(rf"^{re.escape(prefix)}(?:probe-|p)(\d+)-", name)
    return int(match.group(1)) if match else None


def used_indexes() -> set[int]:
    """Indexes whose 10.231.<i>.0/30 subnet is on a host interface or taken by an open network here."""
    used = {network.index for network in list(OPEN)}
    output = run_ip("-o", "-4", "addr", "show", check=False).stdout if os.geteuid() == 0 else ""
    for match in re.finditer(rf"\binet {re.escape(SUBNET_BASE)}\.(\d+)\.", output):
        used.add(int(match.group(1)))
    return used


def unused_index(start: int = 1) -> int:
    """The first index >= `start` that `used_indexes()` does not hold (racy across processes: a
    clash makes `start()` raise NetworkUnavailable rather than share a subnet)."""
    check_index(start)
    used = used_indexes()
    for index in range(start, MAX_INDEX + 1):
        if index not in used:
            return index
    raise NetworkUnavailable(f"no free 10.231.<i>.0/30 subnet with i >= {start}")
