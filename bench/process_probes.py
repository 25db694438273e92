"""What a benchmark's processes cost, read from ``/proc`` (CPU by thread name, RSS, bytes written),
from ZooKeeper's ``mntr`` and from the nodes' Prometheus ``/metrics`` (histogram quantiles over a
window). Linux only; used by ``bench/bench_scale.py``.
"""
from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from urllib.request import urlopen

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# -- /proc ----------------------------------------------------------------------------------------

def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """User + system CPU seconds of a process (or one of its threads)."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread name (threads of one name summed; librdkafka's broker threads folded
    into ``rdk:broker``)."""
    totals: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            seconds = cpu_seconds(pid, int(tid))
        except (FileNotFoundError, ProcessLookupError):
            continue
        name = re.sub(r"^(rdk:broker).*", r"\1", name)
        totals[name] = totals.get(name, 0.0) + seconds
    return totals


def rss_mib(pid: int) -> float:
    """The resident set size of a process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def written_bytes(pid: int) -> int:
    """The bytes a process caused to be written to storage (``/proc/<pid>/io``)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0


def zk_packets_received(host: str, port: int) -> int:
    """ZooKeeper's ``zk_packets_received`` counter (its ``mntr`` four-letter word)."""
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(b"mntr")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    match = re.search(rb"zk_packets_received\s+(\d+)", data)
    return int(match.group(1)) if match else 0


# -- metrics --------------------------------------------------------------------------------------

def scrape(port: int) -> str:
    """The ``/metrics`` text of the node whose metrics listen on ``port`` ("" when it does not answer)."""
    try:
        with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return ""


def buckets(texts: list[str], name: str) -> dict[float, float]:
    """A histogram's cumulative buckets, summed over the nodes' scrapes."""
    summed: dict[float, float] = {}
    for text in texts:
        for bound, count in re.findall(rf'^{name}_bucket\{{[^}}]*le="([^"]+)"[^}}]*\}} ([0-9.e+]+)$', text, re.MULTILINE):
            key = float("inf") if bound == "+Inf" else float(bound)
            summed[key] = summed.get(key, 0.0) + float(count)
    return summed


def counter(texts: list[str], name: str) -> list[float]:
    """A counter's value per scrape (0 where it is absent)."""
    values = []
    for text in texts:
        match = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.MULTILINE)
        values.append(float(match.group(1)) if match else 0.0)
    return values


def quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float | None:
    """The ``q`` quantile of what a histogram counted between two scrapes (the bucket's bound)."""
    window = sorted((bound, after.get(bound, 0.0) - before.get(bound, 0.0)) for bound in after)
    if not window or window[-1][1] <= 0:
        return None
    wanted = q * window[-1][1]
    for bound, count in window:
        if count >= wanted:
            return bound
    return None
