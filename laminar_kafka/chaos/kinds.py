"""The chaos campaign's fault kinds: what each needs from a run and how long it occupies it
(:class:`KindSpec`, :data:`SPECS`), which kinds a campaign on each lake draws (:func:`kinds_of_lake`),
and the parsing of ``--kinds`` (:func:`parse_kinds`). Pure: no I/O.

:data:`KINDS` are the default campaign's (the ``local`` lake), in its round-robin order;
:data:`LAKE_KINDS` the deployment shape's (``--lake s3-rest``: the object store restarted or
unreachable, the REST catalog restarted, unreachable or slow); :data:`CDC_KINDS` the CDC pipeline's
(``--pipeline cdc``: the committer killed, compaction, hot keys, a hot partition moved). They are
kept apart so that the default campaign's round-robin, and so every plan it makes, stays what it
was before them. The
planner is :mod:`laminar_kafka.chaos.plan`; the runner's side of each kind is in
:data:`laminar_kafka.chaos.faults.FAULTS`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "ALL_KINDS", "CDC_KINDS", "KINDS", "KindSpec", "LAKES", "LAKE_KINDS", "MISCONFIGURED_SETTINGS", "PIPELINES", "SPECS",
    "kinds_of_lake", "parse_kinds",
]


@dataclass(frozen=True)
class KindSpec:
    """What a fault kind needs from the run, and how much time it occupies.

    ``budget_s``: the seconds the cluster typically needs after the heal before it is back to steady
    state (a session timeout for a lost node, a broker restart, a round...); used only for spacing.
    ``topology``: the kind changes the set of live nodes (membership accounting applies).
    """

    name: str
    summary: str
    budget_s: float
    brokers: int = 1
    zk_servers: int = 1
    pattern: bool = False
    network: bool = False
    transactional: bool = False
    output_mount: bool = False
    topology: bool = False
    #: the kind acts on the object store and the REST catalog (only with the ``s3-rest`` lake)
    services: bool = False
    #: the kind acts on a CDC pipeline's upserts (only with ``--pipeline cdc``)
    cdc: bool = False

    @property
    def heavy(self) -> bool:
        """Whether the kind needs a costlier stack (3 brokers, 3 ZooKeeper servers, namespaces)."""
        return self.brokers > 1 or self.zk_servers > 1 or self.network


_SPEC_LIST = (
    KindSpec("node-kill", "SIGKILL a node mid-epoch", 10.0, topology=True),
    KindSpec("kill-leader", "SIGKILL the pipeline leader", 12.0, topology=True),
    KindSpec("kill-donor", "SIGKILL a node while it drains partitions away in a round", 14.0, topology=True),
    KindSpec("kill-recipient", "SIGKILL a node while it receives partitions in a round", 14.0, topology=True),
    KindSpec("zombie", "SIGSTOP a node past its session timeout, then SIGCONT", 8.0),
    KindSpec("leave", "SIGTERM a node (planned leave)", 8.0, topology=True),
    KindSpec("join", "start a node with a new id", 8.0, topology=True),
    KindSpec("churn", "a burst of leaves and joins", 10.0, topology=True),
    KindSpec("add-partitions", "add partitions to a topic while nodes run", 8.0, pattern=True),
    KindSpec("new-topic", "create a topic that matches the nodes' pattern", 8.0, pattern=True),
    KindSpec("broker-kill", "SIGKILL a Kafka broker of 3 (sometimes the busiest leader), restart it", 15.0, brokers=3),
    KindSpec("broker-freeze", "SIGSTOP a Kafka broker for a few seconds or past the clients' 15 s stall, then "
             "SIGCONT (fenced for a moment, it may leave a client knowing no broker)", 35.0),
    KindSpec("zk-kill", "SIGKILL a ZooKeeper server of 3, restart it", 10.0, zk_servers=3),
    KindSpec("zk-quorum-loss", "SIGKILL 2 of 3 ZooKeeper servers, restart them", 12.0, zk_servers=3),
    KindSpec("session-expiry", "expire a node's ZooKeeper session on the server", 8.0),
    KindSpec("net-zk", "cut one node from ZooKeeper only", 8.0, network=True),
    KindSpec("net-kafka", "cut one node from Kafka only", 8.0, network=True),
    KindSpec("net-slow", "slow links (added latency) for one or all nodes", 5.0, network=True),
    KindSpec("transactions", "a burst of aborted transactions from a transactional producer", 4.0, transactional=True),
    KindSpec("output-readonly", "the output directory becomes read-only, then writable again", 8.0, output_mount=True),
    KindSpec("output-full", "the output file system becomes full, then has room again", 8.0, output_mount=True),
    # State faults: the control state lost, replaced or old, the lake behind it, a node
    # that disagrees with the pipeline's pinned settings (laminar_kafka.chaos.faults_state)
    KindSpec("zk-subtree-lost", "delete the pipeline's ZooKeeper subtree while the nodes run, or while all are stopped",
             20.0),
    KindSpec("zk-ensemble-replaced", "replace ZooKeeper by a fresh, empty one at the same address while the nodes run",
             20.0),
    KindSpec("zk-rollback", "restore ZooKeeper's data from a copy taken some epochs earlier (nodes stopped)", 24.0),
    KindSpec("lake-rollback", "delete the last epochs' published files (and half the time their records), "
             "nodes stopped", 20.0),
    KindSpec("misconfigured-node", "start a node with one pipeline-defining setting changed (exit 2, one line)", 4.0),
)

# The kinds of the deployment shape (``laminar-kafka chaos --lake s3-rest``): the lake on an object
# store (SeaweedFS S3) through a REST catalog, each reached by the nodes through a fault proxy
# (laminar_kafka.chaos.faults_infra). Not in KINDS: the default campaign's kinds and their round-robin
# stay what they were.
_LAKE_SPEC_LIST = (
    KindSpec("store-restart", "restart the object store on its data (SIGKILL or SIGTERM)", 15.0, services=True),
    KindSpec("store-unreachable", "the object store unreachable for longer than an epoch, then reachable again",
             15.0, services=True),
    KindSpec("catalog-restart", "restart the REST catalog (SIGKILL or SIGTERM)", 12.0, services=True),
    KindSpec("catalog-unreachable", "the REST catalog unreachable (silent or refusing), then reachable again",
             12.0, services=True),
    KindSpec("catalog-slow", "the REST catalog slow (latency on every exchange), then fast again", 8.0,
             services=True),
)

# The kinds of the CDC pipeline (``laminar-kafka chaos --pipeline cdc``: Debezium change events upserted
# into Iceberg tables; laminar_kafka.chaos.cdc.faults). Not in KINDS either, for the same reason.
_CDC_SPEC_LIST = (
    KindSpec("kill-committer", "SIGKILL the node whose turn it is to commit an epoch's tables, while it commits",
             10.0, topology=True, cdc=True),
    KindSpec("compact-during-upserts", "run `laminar-kafka compact` on the table while the nodes upsert", 8.0,
             cdc=True),
    KindSpec("hot-keys", "a burst of updates (and deletes) to a few keys across many epochs", 6.0, cdc=True),
    KindSpec("move-hot-partition", "a burst of updates to keys of one partition while its owner leaves (its "
             "partition moves to another node), a new node joining after it when the floor needs one", 10.0,
             topology=True, cdc=True),
)

#: ``misconfigured-node``: the settings it changes (the fault picks the value: see chaos_faults_state)
MISCONFIGURED_SETTINGS = ("vnode-count", "format", "partition-by", "source-identity", "output")

#: every kind, by name (the lake kinds included)
SPECS: Mapping[str, KindSpec] = {spec.name: spec for spec in (*_SPEC_LIST, *_LAKE_SPEC_LIST, *_CDC_SPEC_LIST)}
#: the default campaign's kinds (a local lake), in its round-robin order
KINDS: tuple[str, ...] = tuple(spec.name for spec in _SPEC_LIST)
#: the kinds of the object store and the catalog (``--lake s3-rest`` only)
LAKE_KINDS: tuple[str, ...] = tuple(spec.name for spec in _LAKE_SPEC_LIST)
#: the kinds of the CDC pipeline's upserts (``--pipeline cdc`` only)
CDC_KINDS: tuple[str, ...] = tuple(spec.name for spec in _CDC_SPEC_LIST)
#: every kind: :data:`KINDS`, then :data:`LAKE_KINDS`, then :data:`CDC_KINDS` (the report's order)
ALL_KINDS: tuple[str, ...] = KINDS + LAKE_KINDS + CDC_KINDS
#: the lakes a campaign lands into: ``local`` (one output directory the nodes share: a Parquet tree,
#: or Iceberg with a SQLite catalog) and ``s3-rest`` (SeaweedFS S3 through an Iceberg REST catalog)
LAKES: tuple[str, ...] = ("local", "s3-rest")
#: what the campaign's pipeline lands: ``append`` (opaque records, every offset once: the default) or
#: ``cdc`` (Debezium change events upserted into Iceberg tables: the final state of every key)
PIPELINES: tuple[str, ...] = ("append", "cdc")


def kinds_of_lake(lake: str, pipeline: str = "append") -> tuple[str, ...]:
    """The kinds a campaign on ``lake`` draws by default, in round-robin order: ``local``:
    :data:`KINDS`; ``s3-rest``: :data:`KINDS` without those of a local output mount (a read-only or
    full file system), then :data:`LAKE_KINDS`. The ``cdc`` pipeline (local lake only): :data:`CDC_KINDS`
    first (so a few seeds draw them all), then :data:`KINDS`. Raises ValueError for an unknown lake or
    pipeline, or the cdc pipeline on another lake."""
    if pipeline not in PIPELINES:
        raise ValueError(f"unknown pipeline {pipeline!r} (pipelines: {', '.join(PIPELINES)})")
    if pipeline == "cdc":
        if lake != "local":
            raise ValueError(f"the cdc pipeline runs on the local lake, not {lake!r}")
        return CDC_KINDS + KINDS
    if lake == "local":
        return KINDS
    if lake == "s3-rest":
        return tuple(k for k in KINDS if not SPECS[k].output_mount) + LAKE_KINDS
    raise ValueError(f"unknown lake {lake!r} (lakes: {', '.join(LAKES)})")


def parse_kinds(text: str | None, available: Sequence[str] = KINDS) -> tuple[str, ...]:
    """``"a,b"`` -> ``("a", "b")`` (every kind of ``available`` when empty). Raises ValueError naming
    an unknown kind and the nearest valid one, or a kind that ``available`` (the campaign's lake)
    does not have."""
    if not text:
        return tuple(available)
    import difflib

    chosen: list[str] = []
    for raw in text.split(","):
        name = raw.strip()
        if not name:
            continue
        if name in CDC_KINDS and name not in available:
            raise ValueError(f"fault kind {name!r} needs --pipeline cdc")
        if name in SPECS and name not in available:
            lakes = [lake for lake in LAKES if name in kinds_of_lake(lake)]
            raise ValueError(f"fault kind {name!r} needs --lake {' or '.join(lakes)}")
        if name not in SPECS:
            near = difflib.get_close_matches(name, available, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else f" (kinds: {', '.join(available)})"
            raise ValueError(f"unknown fault kind {name!r}{hint}")
        if name not in chosen:
            chosen.append(name)
    if not chosen:
        raise ValueError("no fault kind given")
    return tuple(chosen)
