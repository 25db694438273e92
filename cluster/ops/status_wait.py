"""`laminar-kafka status --wait SECONDS`: observe a pipeline until it has caught up, or time out.

Caught up (:func:`caught_up`): the verdict is healthy and every partition's durable cursor has
reached its high watermark (durable lag 0), so every record Kafka held when observed is committed;
when the observation read the lake too (``status --output``), the lake's own cursors (its latest
whole epoch's record) have also reached the durable cursors: the nodes publish an epoch's files after
they hear it committed, so before that a reader of the lake (``verify``) would not see them yet. The
cursors are compared, not the epoch numbers: an Iceberg table records only the epochs that brought
it rows, so its latest epoch trails the manifest's while the pipeline idles. A script waits on it before it audits (``verify``) or moves on; an observation that fails
(the pipeline not created yet, a server not answering yet) is waited through like a lagging one.
When the time is up, the last observation's verdict is the answer; a healthy pipeline that is
still behind counts as degraded, with the lag as its reason (:func:`not_caught_up`).

:func:`wait_caught_up` takes its clock and sleep as arguments: the loop is tested without time.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from laminar_kafka.cluster.errors import UsageError
from laminar_kafka.cluster.ops.health import DEFAULT_STALE_AFTER, Health, HealthCode, assess, unreachable
from laminar_kafka.cluster.ops.status import PartitionStatus, PipelineStatus

__all__ = ["caught_up", "lake_behind", "not_caught_up", "wait_caught_up"]


def lake_behind(status: PipelineStatus) -> tuple[PartitionStatus, ...]:
    """The partitions whose durable cursor the lake's own cursor has not reached yet (records committed
    but the epoch's files not yet published); none when the lake was not read. Pure."""
    if status.lake is None:
        return ()
    lake = status.lake.cursors
    return tuple(p for p in status.partitions if (p.durable_cursor or 0) > lake.get(p.partition, 0))


def caught_up(status: PipelineStatus, health: Health) -> bool:
    """Healthy, with at least one partition, each at durable lag 0 (a partition without a durable
    cursor counts as caught up only while its topic partition is empty), and the lake, when read,
    holding every durable record (:func:`lake_behind` is empty). Pure."""
    if health.code is not HealthCode.HEALTHY or not status.partitions or lake_behind(status):
        return False
    return all(p.durable_lag == 0 if p.durable_lag is not None else p.high_watermark == 0 for p in status.partitions)


def not_caught_up(status: PipelineStatus, waited: float) -> Health:
    """The verdict of a healthy pipeline still behind when the wait ends: degraded, one reason (the
    records not yet durable, else the durable records not yet in the lake). Pure."""
    behind = [p for p in status.partitions if p.durable_lag != 0 and not (p.durable_lag is None and p.high_watermark == 0)]
    unpublished = lake_behind(status)
    if not behind and unpublished and status.lake is not None:
        lake = status.lake
        missing = sum((p.durable_cursor or 0) - lake.cursors.get(p.partition, 0) for p in unpublished)
        return Health(HealthCode.DEGRADED, (
            f"not caught up after {waited:.0f} s: {missing} durable records on {len(unpublished)} partition(s) "
            f"not yet in the lake (its latest epoch {lake.epoch}, the last committed {status.last_epoch})",))
    return Health(HealthCode.DEGRADED, (f"not caught up after {waited:.0f} s: {status.total_durable_lag} records on "
                                        f"{len(behind)} partition(s) not yet durable",))


def wait_caught_up(
    observe: Callable[[], PipelineStatus],
    *,
    timeout: float,
    interval: float,
    stale_after: float = DEFAULT_STALE_AFTER,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[PipelineStatus | None, Health]:
    """Observe every ``interval`` seconds until an observation is caught up (returned with its
    healthy verdict) or ``timeout`` seconds passed: then the last observation (None when it failed)
    and its verdict: unreachable (the failure's one line), degraded, or :func:`not_caught_up`.
    ``observe`` raises :class:`UsageError` when it cannot read the pipeline."""
    started = clock()
    while True:
        status: PipelineStatus | None
        try:
            status = observe()
        except UsageError as exc:
            status, health = None, unreachable(str(exc))
        else:
            health = assess(status, stale_after=stale_after)
            if caught_up(status, health):
                return status, health
        waited = clock() - started
        if waited >= timeout:
            if status is not None and health.code is HealthCode.HEALTHY:
                health = not_caught_up(status, waited)
            return status, health
        sleep(min(interval, max(0.0, timeout - waited)))
