"""What the campaign's pipeline (:data:`laminar_kafka.chaos.kinds.PIPELINES`) changes in a run: its
producer, its nodes' flags and its audit.

- ``append`` (the default): :class:`~laminar_kafka.chaos.producer.ChaosProducer`'s opaque records,
  audited offset by offset (:func:`laminar_kafka.chaos.evidence.audit_run`: 0 missing, 0 duplicated).
- ``cdc``: :class:`~laminar_kafka.chaos.cdc.producer.CdcProducer`'s Debezium change events over
  ``keys`` keys, the nodes reading them with ``--format debezium-json --upsert-keys id`` (and the rows' schema) into
  Iceberg tables, audited against the final state of every key
  (:func:`laminar_kafka.chaos.cdc.audit.audit_cdc`).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

from laminar_kafka.chaos.cdc.audit import audit_cdc
from laminar_kafka.chaos.cdc.producer import CDC_NODE_FLAGS, CdcProducer
from laminar_kafka.chaos.evidence import audit_run
from laminar_kafka.chaos.lake import RunLake
from laminar_kafka.chaos.producer import ChaosProducer
from laminar_kafka.chaos.report import RunResult

__all__ = ["Audit", "auditor", "new_producer", "node_flags"]

#: ``audit(result, partitions by topic, producer, lake, bootstrap)``: fills the result
Audit = Callable[[RunResult, Mapping[str, int], ChaosProducer, RunLake, str], None]


def new_producer(pipeline: str, bootstrap: str, rate: int, *, seed: int, transactional_id: str | None, keys: int,
                 partitions: int) -> ChaosProducer:
    """The run's producer (not started); ``keys`` over ``partitions`` partitions for ``cdc``."""
    if pipeline == "cdc":
        return CdcProducer(bootstrap, rate, keys_per_partition=-(-keys // partitions), seed=seed,
                           transactional_id=transactional_id)
    return ChaosProducer(bootstrap, rate, seed=seed, transactional_id=transactional_id)


def node_flags(pipeline: str) -> list[str]:
    """The flags the pipeline adds to every node's command line."""
    return list(CDC_NODE_FLAGS) if pipeline == "cdc" else []


def auditor(pipeline: str) -> Audit:
    return audit_cdc if pipeline == "cdc" else audit_run
