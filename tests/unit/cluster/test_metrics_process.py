"""`/metrics` carries the standard process_* families of the node's own process, on its own registry."""
from __future__ import annotations

import os
import socket
import time
import urllib.request

import pytest
from prometheus_client import generate_latest

from laminar_kafka.cluster.metrics import NodeMetrics

PROCESS_FAMILIES = ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_start_time_seconds",
                    "process_virtual_memory_bytes", "process_open_fds")


def samples(metrics: NodeMetrics) -> dict[str, float]:
    return {s.name: s.value for family in metrics.registry.collect() for s in family.samples}


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="process_* families need /proc (Linux)")
def test_the_registry_exposes_the_process_families_of_this_process() -> None:
    values = samples(NodeMetrics(1))
    for name in PROCESS_FAMILIES:
        assert name in values, name
    assert values["process_resident_memory_bytes"] > 1_000_000
    assert values["process_cpu_seconds_total"] > 0
    assert 0 < time.time() - values["process_start_time_seconds"] < 24 * 3600
    assert any(name == "python_info" for name in values)


def test_two_nodes_in_one_process_each_have_their_own_process_families() -> None:
    first, second = NodeMetrics(1), NodeMetrics(2)  # no "Duplicated timeseries" between registries
    assert b"process_cpu_seconds_total" in generate_latest(first.registry)
    assert b"process_cpu_seconds_total" in generate_latest(second.registry)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_binds_the_given_address_and_exports_the_process_families() -> None:
    metrics = NodeMetrics(1)
    port = free_port()
    stop = metrics.serve(port, "127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            body = response.read().decode()
        assert "process_resident_memory_bytes" in body and 'laminar_records_in_total{node="1"} 0.0' in body
    finally:
        stop()
