"""Real Kafka, ZooKeeper and containers for development, the demo, the tests, the benches and chaos.

Nothing in the runtime depends on this package: only the command line's `dev`, `demo` and `chaos`
commands import it, lazily. The pieces, one concern each:

- `jvm/`: the JVM servers: `servers` (`KafkaCluster` in KRaft, `ZooKeeperEnsemble`, with fault
  controls), `artifacts` (the Maven POM that pins them, and the jar cache), a schema registry and an
  Iceberg REST catalog.
- `processes`: ports, pids, and `NodeProcess` (one `laminar-kafka run` subprocess).
- `stack`: `DevStack` (the servers started together) and its recorded state for `dev up|status|down`.
- `topics`, `producers`, `waiting`: `create_topic`, `ContinuousProducer` / `produce`, `wait_until`.
- `s3`, `security`: a real S3 server on loopback; TLS material and SCRAM users for a secured Kafka.
- `netfaults/`: network faults. `containers/`: the project's images, server containers and compose.

It never imports :mod:`laminar_kafka.cluster`: the tools that drive both (the demo, the chaos
campaign, the `dev` commands) live on the top floor, in :mod:`laminar_kafka` itself.
"""
from __future__ import annotations

from laminar_kafka.coordinator.versioning import installed_version


def __getattr__(name: str) -> str:
    """``__version__``, looked up on first use (:mod:`laminar_kafka.coordinator.versioning`): the command line
    imports this package to build its parser, and ``importlib.metadata`` costs every process."""
    if name == "__version__":
        return installed_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
