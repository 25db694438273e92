"""laminar-kafka: an exactly-once, splittable Kafka source and the cluster that lands Kafka into a lake.

One import namespace for the whole distribution (nothing else is installed at the top level):

- :mod:`laminar_kafka.coordinator`: vnode assignment (pure) and its ZooKeeper and embedded backends.
- :mod:`laminar_kafka.connector`: the source-connector protocol (nothing of Kafka) and its conformance kit.
- :mod:`laminar_kafka.kafka_source`: :class:`KafkaSource`; :mod:`laminar_kafka.redis_source`: a source over
  Redis Streams.
- :mod:`laminar_kafka.cluster`: the node runtime, the lake (Parquet tree, Iceberg), the operator views.
- :mod:`laminar_kafka.devstack`: real servers and containers for development and tests (the ``dev``
  extra); never imported by a node.
- The top floor, here: :mod:`laminar_kafka.cli` (the ``laminar-kafka`` command), :mod:`.demo` and
  :mod:`.chaos`, the tools that drive both the runtime and the dev stack.

Floors import downward only (``tests/unit/test_layering.py``): coordinator < connector < kafka_source,
redis_source (side by side) < cluster, devstack (side by side), and this top floor over all.
"""
from __future__ import annotations

from laminar_kafka.coordinator.versioning import installed_version


def __getattr__(name: str) -> str:
    """``__version__``, looked up on first use (``importlib.metadata`` costs every process)."""
    if name == "__version__":
        return installed_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
