"""Real Kafka, ZooKeeper and containers for development, the demo, the tests, the benches and chaos.

Nothing in the runtime depends on this package: only the command line's `dev`, `demo` and `chaos`
commands import it, lazily. The pieces, one concern each:

- `artifacts`: the Maven POM (`pom.xml`) that pins Kafka and ZooKeeper, and the jar cache.
- `processes`: ports, pids, and `NodeProcess` (one `laminar-kafka run` subprocess).
- `servers`: `JvmServer`, `KafkaCluster` (KRaft), `ZooKeeperEnsemble`, with fault controls.
- `stack`: `DevStack` (the servers started together) and its recorded state for `dev up|status|down`.
- `topics`, `producers`, `waiting`: `create_topic`, `ContinuousProducer` / `produce`, `wait_until`.
- `demo`: `laminar-kafka demo`. `chaos*`: the chaos campaign. `netfaults*`: network faults.
  `containers*`: the project's images, server containers and the compose driver.
"""
from __future__ import annotations

from coordinator.versioning import installed_version


def __getattr__(name: str) -> str:
    """``__version__``, looked up on first use (:mod:`coordinator.versioning`): the command line
    imports this package to build its parser, and ``importlib.metadata`` costs every process."""
    if name == "__version__":
        return installed_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
