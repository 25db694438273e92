"""LagExporter: the lag series of exactly the partitions the node reads, none without a connector."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

import pytest

from laminar_kafka.cluster.metrics import NodeMetrics
from laminar_kafka.cluster.runtime.context import RuntimeContext
from laminar_kafka.cluster.runtime.measures import LagExporter
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId


class _Done(Exception):
    """Ends the exporter's loop after the last planned step."""


@dataclass(frozen=True)
class _Checkpoint:
    offsets: dict[str, int]


@dataclass(frozen=True)
class _Source:
    offsets: dict[str, int]

    def checkpoint(self) -> _Checkpoint:
        return _Checkpoint(self.offsets)


class _InlineExecutors:
    async def in_metadata(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)


def _series(metrics: NodeMetrics, name: str) -> dict[tuple[str, str], float]:
    return {(s.labels["topic"], s.labels["partition"]): s.value
            for m in metrics.registry.collect() if m.name == name for s in m.samples}


async def test_handed_off_partitions_and_a_node_without_generation_export_no_lag() -> None:
    metrics = NodeMetrics(4)
    context = cast(RuntimeContext, SimpleNamespace(metrics=metrics, executors=_InlineExecutors()))
    highs = {("t", 0): 100, ("t", 1): 50, ("t", 2): 10}
    # each step: the partitions the node reads (None: no connector, no generation)
    steps: list[list[TopicPartitionId] | None] = [[("t", 0), ("t", 1)], [("t", 1)], None, [("t", 2)]]
    seen: list[tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]] = []
    current: list[list[TopicPartitionId] | None] = [None]

    def connector() -> _Source | None:
        if current[0] is not None or seen:
            seen.append((_series(metrics, "laminar_lag_records"), _series(metrics, "laminar_durable_lag_records")))
        if not steps:
            raise _Done
        current[0] = steps.pop(0)
        return None if current[0] is None else _Source({"t:0": 90, "t:1": 45, "t:2": 10})

    def partitions() -> list[TopicPartitionId]:
        assert current[0] is not None
        return current[0]

    def watermarks(tps: list[TopicPartitionId]) -> dict[TopicPartitionId, int]:
        return {tp: highs[tp] for tp in tps}

    exporter = LagExporter(context, cast(Any, watermarks))
    with pytest.raises(_Done):
        await exporter.run(connector, partitions, lambda: {"t:0": 80, "t:1": 40}, period_s=0)
    assert seen == [
        ({("t", "0"): 10, ("t", "1"): 5}, {("t", "0"): 20, ("t", "1"): 10}),
        ({("t", "1"): 5}, {("t", "1"): 10}),  # t/0 handed off: its series is gone
        ({}, {}),  # no generation: nothing exported
        ({("t", "2"): 0}, {("t", "2"): 10}),
    ]
