"""`laminar-kafka status`: a read-only view of a pipeline.

:func:`build_status` is pure (members, leader, assignment, the latest manifest and the topic's high
watermarks in; a :class:`PipelineStatus` out). :func:`collect_status` reads those inputs through the
coordinator's store (:class:`~laminar_kafka.coordinator.store.ControlStore`, its observer's reads:
:func:`read_control` on ZooKeeper, which never joins the pipeline and never writes; an embedded
node's state directory through :class:`~laminar_kafka.coordinator.local.store.LocalStore`), and the
high watermarks from Kafka (:func:`read_kafka`) through the pipeline's shared client configuration
(:class:`~laminar_kafka.kafka_source.clients.KafkaClientConfig`: SASL/SSL settings included). The
health verdict (exit codes 0/1/3) is :func:`laminar_kafka.cluster.ops.health.assess`.

The topics are the ones asked for, or else the pipeline's own: the ``topic`` setting its first node
pinned in the control state (:mod:`laminar_kafka.cluster.lake.pins`), names or a ``re:<regex>``
matched against Kafka's topics (:func:`status_topics`).
"""
from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

from laminar_kafka.cluster.errors import UsageError
from laminar_kafka.cluster.lake.pins import pin_name
from laminar_kafka.cluster.lake.settings import LakeTarget
from laminar_kafka.cluster.ops.lake_state import LakeState, read_lake_state
from laminar_kafka.cluster.ops.status_kafka import read_kafka, status_topics
from laminar_kafka.coordinator.codec import format_partition_key
from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.values import Manifest, Member
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId, partitions_by_vnode
from laminar_kafka.kafka_source.clients import KafkaClientConfig

if TYPE_CHECKING:
    from laminar_kafka.coordinator.config import ZkCredentials
    from laminar_kafka.coordinator.store import ControlStore

#: The ZooKeeper root pipelines live under unless configured otherwise.
DEFAULT_ROOT: str = CoordinatorConfig.root

__all__ = [
    "DEFAULT_ROOT", "ControlView", "NodeStatus", "PartitionStatus", "PipelineStatus", "build_status",
    "collect_status", "partition_ranges", "read_control", "read_kafka", "read_zookeeper", "status_topics",
]


@dataclass(frozen=True)
class NodeStatus:
    node_id: int
    boot_id: str
    live: bool
    leader: bool
    leaving: bool
    vnodes: int
    partitions: tuple[str, ...]


@dataclass(frozen=True)
class PartitionStatus:
    partition: str
    owner: int
    vnode: int
    durable_cursor: int | None
    high_watermark: int

    @property
    def durable_lag(self) -> int | None:
        return None if self.durable_cursor is None else max(0, self.high_watermark - self.durable_cursor)


@dataclass(frozen=True)
class PipelineStatus:
    """One observation of a pipeline. ``observed_at``: when it was read (seconds since the epoch, 0 if
    unknown); ``manifest_written_at``: when the last manifest was written (ZooKeeper's mtime of its
    node, or its file's mtime; None if unknown or no manifest)."""

    pipeline: str
    assignment_version: int
    leader: int | None
    last_epoch: int
    nodes: tuple[NodeStatus, ...]
    partitions: tuple[PartitionStatus, ...]
    round: Mapping[str, object] | None
    observed_at: float = 0.0
    manifest_written_at: float | None = None
    #: the lake's account (``status --output``), None when it was not read
    lake: LakeState | None = None

    @property
    def total_durable_lag(self) -> int:
        """The durable lag summed over the partitions (a partition without a durable cursor counts 0)."""
        return sum(p.durable_lag or 0 for p in self.partitions)

    @property
    def manifest_age(self) -> float | None:
        """Seconds between the last manifest's write and this observation (None if unknown)."""
        if self.manifest_written_at is None or not self.observed_at:
            return None
        return max(0.0, self.observed_at - self.manifest_written_at)

    def to_json(self) -> dict[str, object]:
        return {
            "pipeline": self.pipeline,
            "assignment_version": self.assignment_version,
            "leader": self.leader,
            "last_epoch": self.last_epoch,
            "nodes": [{**asdict(n), "partitions": list(n.partitions)} for n in self.nodes],
            "partitions": [{**asdict(p), "durable_lag": p.durable_lag} for p in self.partitions],
            "round": dict(self.round) if self.round else None,
            "observed_at": self.observed_at,
            "manifest_written_at": self.manifest_written_at,
            "lake": None if self.lake is None else self.lake.to_json(),
        }

    def table(self) -> str:
        age = self.manifest_age
        lines = [
            f"pipeline {self.pipeline}: assignment version {self.assignment_version}, "
            f"leader {self.leader if self.leader is not None else '-'}, last committed epoch {self.last_epoch}"
            + (f" ({age:.0f} s ago)" if age is not None else ""),
            "",
            f"{'node':>5} {'state':<8} {'vnodes':>6} {'parts':>5}  partitions",
        ]
        for n in self.nodes:
            lines.append(f"{n.node_id:>5} {node_state(n):<8} {n.vnodes:>6} {len(n.partitions):>5}  "
                         f"{partition_ranges(n.partitions, PARTITIONS_WIDTH)}")
        lines += ["", f"{'partition':<24} {'owner':>5} {'vnode':>5} {'durable':>10} {'high':>10} {'lag':>8}"]
        for p in self.partitions:
            durable = "-" if p.durable_cursor is None else str(p.durable_cursor)
            lag = "-" if p.durable_lag is None else str(p.durable_lag)
            lines.append(f"{p.partition:<24} {p.owner:>5} {p.vnode:>5} {durable:>10} {p.high_watermark:>10} {lag:>8}")
        lines.append("")
        lines.append(f"round: {json.dumps(dict(self.round)) if self.round else 'none running'}")
        if self.lake is not None:
            lines.append(self.lake.line())
        return "\n".join(lines)


def node_state(node: NodeStatus) -> str:
    """``leader``, ``leaving``, ``live`` or ``gone`` (an owner without a live session)."""
    return "leader" if node.leader else ("leaving" if node.leaving else ("live" if node.live else "gone"))


#: characters of a node's partition runs in the ``status`` table (``--json`` lists every partition)
PARTITIONS_WIDTH = 100


def partition_ranges(keys: Sequence[str], width: int | None = None) -> str:
    """``topic:partition`` keys as runs per topic: ``orders:0-3,5,7-9 payments:0``, topics and
    partitions in order (a node of 1000 partitions reads ``orders:0-999``, not 1000 keys). Longer
    than ``width`` (vnodes scatter partitions): cut after the last whole run that fits, then
    ``,... (--json lists all)``."""
    by_topic: dict[str, list[int]] = {}
    for key in keys:
        topic, partition = _partition_key(key)
        by_topic.setdefault(topic, []).append(partition)
    groups = []
    for topic, partitions in sorted(by_topic.items()):
        runs: list[list[int]] = []
        for partition in sorted(set(partitions)):
            if runs and partition == runs[-1][1] + 1:
                runs[-1][1] = partition
            else:
                runs.append([partition, partition])
        groups.append(f"{topic}:" + ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs))
    text = " ".join(groups)
    if width is None or len(text) <= width:
        return text
    cut = max(text.rfind(",", 0, width), text.rfind(" ", 0, width))
    return (text[:cut] if cut > 0 else text[:width]) + ",... (--json lists all)"


def _partition_key(key: str) -> tuple[str, int]:
    """``(topic, partition)`` of a displayed ``topic:partition`` key: what precedes the last colon is
    the topic. Lenient on purpose (it only orders and groups text for display); the strict decoder
    of durable keys is :func:`laminar_kafka.coordinator.codec.parse_partition_key`."""
    topic, _, partition = key.rpartition(":")
    return topic, int(partition)


def build_status(
    *,
    pipeline: str,
    source_identity: str,
    members: Sequence[Member],
    leader: int | None,
    snapshot: AssignmentSnapshot,
    manifest: Manifest | None,
    high_watermarks: Mapping[TopicPartitionId, int],
    round_info: Mapping[str, object] | None = None,
    observed_at: float = 0.0,
    manifest_written_at: float | None = None,
) -> PipelineStatus:
    """Assemble the view. Pure. Nodes: every member plus every owner that is not a member (gone)."""
    by_vnode = partitions_by_vnode(source_identity, high_watermarks, snapshot.vnode_count)
    cursors = manifest.cursors.get(source_identity, {}) if manifest is not None else {}
    partitions = []
    per_node: dict[int, list[str]] = {}
    for vnode, tps in by_vnode.items():
        owner = snapshot.owners[vnode]
        for topic, partition in tps:
            key = format_partition_key(topic, partition)
            per_node.setdefault(owner, []).append(key)
            partitions.append(PartitionStatus(key, owner, vnode, cursors.get(key), high_watermarks[(topic, partition)]))
    partitions.sort(key=lambda p: _partition_key(p.partition))
    member_by_id = {m.node_id: m for m in members}
    node_ids = sorted(set(member_by_id) | snapshot.nodes())
    nodes = tuple(
        NodeStatus(
            node_id=n,
            boot_id=member_by_id[n].boot_id if n in member_by_id else "",
            live=n in member_by_id,
            leader=n == leader,
            leaving=member_by_id[n].leaving if n in member_by_id else False,
            vnodes=len(snapshot.vnodes_of(n)),
            partitions=tuple(sorted(per_node.get(n, []), key=_partition_key)),
        )
        for n in node_ids
    )
    return PipelineStatus(
        pipeline=pipeline,
        assignment_version=snapshot.version,
        leader=leader,
        last_epoch=manifest.epoch if manifest is not None else 0,
        nodes=nodes,
        partitions=tuple(partitions),
        round=round_info,
        observed_at=observed_at,
        manifest_written_at=manifest_written_at if manifest is not None else None,
    )


@dataclass(frozen=True)
class ControlView:
    """What the coordinator's store says about a pipeline (ZooKeeper or an embedded state directory)."""

    members: tuple[Member, ...]
    leader: int | None
    snapshot: AssignmentSnapshot | None
    manifest: Manifest | None
    round_info: Mapping[str, object] | None
    manifest_written_at: float | None = None
    #: the pipeline's pinned ``topic`` setting (normal form), None when not pinned (or not read)
    topics_pin: str | None = None


def read_control(hosts: str, pipeline: str, timeout: float, root: str,
                 credentials: ZkCredentials | None = None, *, absent_ok: bool = False) -> ControlView:
    """Read the pipeline under ``<root>/<pipeline>`` through the coordinator's ZooKeeper store
    (:class:`~laminar_kafka.coordinator.zk.store.ZooKeeperStore`, its observer's reads only: nothing
    is written, the pipeline is not joined); the manifest through the checked chunk codec (a truncated
    or mismatching chunk set is an error). ``credentials``: the pipeline's ZooKeeper digest identity
    (its subtree is unreadable without). ``absent_ok``: a pipeline that does not exist reads as
    empty instead of an error."""
    from kazoo.exceptions import AuthFailedError, NoAuthError
    from kazoo.handlers.threading import KazooTimeoutError

    from laminar_kafka.coordinator.engine.events import CoordinatorMetrics
    from laminar_kafka.coordinator.errors import CodecError, CoordinatorError
    from laminar_kafka.coordinator.zk.auth import open_client
    from laminar_kafka.coordinator.zk.store import ZooKeeperStore
    from laminar_kafka.errors import ConfigurationError

    try:
        config = CoordinatorConfig(pipeline=pipeline, hosts=hosts, root=root, session_timeout=timeout)
    except ConfigurationError as exc:
        raise UsageError(exc.message, cause=exc) from exc
    client = open_client(hosts, timeout, credentials, read_only=True)
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError as exc:
        raise UsageError(f"cannot reach ZooKeeper at {hosts} within {timeout:.0f}s", cause=exc) from exc
    store = ZooKeeperStore(client, config, CoordinatorMetrics())
    try:
        if not store.exists():
            if absent_ok:  # the lake is read too: it says where a node starting now resumes
                return ControlView((), None, None, None, None)
            raise UsageError(f"pipeline {pipeline!r} does not exist in ZooKeeper at {hosts} (under {root})")
        return _control_view(store)
    except (NoAuthError, AuthFailedError) as exc:
        raise UsageError(f"ZooKeeper denied access to pipeline {pipeline!r} under {root}: credentials missing "
                         "or wrong", cause=exc) from exc
    except CodecError as exc:
        raise UsageError(f"pipeline {pipeline!r} holds a malformed record: {exc.message}", cause=exc) from exc
    except CoordinatorError as exc:
        raise UsageError(f"pipeline {pipeline!r} cannot be read: {exc.message}", cause=exc) from exc
    finally:
        client.stop()
        client.close()


def _control_view(store: ControlStore, *, one_process: bool = False) -> ControlView:
    """Members, leader, the register and the manifest of its last epoch (before the first commit: the
    pinned initial manifest, epoch 0) with its write time, read from ``store``.

    ``one_process``: an embedded pipeline read from another process, whose members live in that
    process's memory: the register's owners stand for the members (whether the process still runs,
    status cannot tell without a process table), the first of them for the leader. The pinned
    ``topic`` setting is read too (read only: ``pin_setting`` with no value writes nothing)."""
    if one_process:
        control = store.read_register()
        members = tuple(Member(n, b) for n, b in control.boots) if control is not None else ()
        leader = members[0].node_id if members else None
    else:
        found = store.read_members()
        members = tuple(found[n] for n in sorted(found))
        leader = store.read_leader()
        control = store.read_register()
    topics_pin = store.pin_setting(pin_name("topic"), None)
    if control is None:
        return ControlView(members, leader, None, None, None, topics_pin=topics_pin)
    stored = store.read_stored_manifest(control.last_epoch)
    return ControlView(
        members, leader, control.snapshot, None if stored is None else stored.manifest,
        None if control.round is None else control.round.to_dict(), None if stored is None else stored.written_at,
        topics_pin,
    )


def read_zookeeper(hosts: str, pipeline: str, timeout: float, root: str,
                   credentials: ZkCredentials | None = None) -> tuple[
    list[Member], int | None, AssignmentSnapshot | None, Manifest | None, Mapping[str, object] | None
]:
    """:func:`read_control` as a tuple (members, leader, snapshot, manifest, round)."""
    view = read_control(hosts, pipeline, timeout, root, credentials)
    return list(view.members), view.leader, view.snapshot, view.manifest, view.round_info


def collect_status(
    *,
    topics: Sequence[str],
    zk: str | None,
    state_dir: str | None,
    pipeline: str,
    source_identity: str,
    kafka: KafkaClientConfig | None = None,
    bootstrap: str | KafkaClientConfig | None = None,
    credentials: ZkCredentials | None = None,
    timeout: float = 10.0,
    root: str = DEFAULT_ROOT,
    lake: LakeTarget | None = None,
) -> PipelineStatus:
    """Read everything the view needs; :class:`UsageError` (one line, no secret) when a server does
    not answer or denies access, the topic or the pipeline does not exist, or a record is malformed.

    ``kafka``: the shared Kafka client configuration; ``bootstrap`` is accepted instead (a
    :class:`KafkaClientConfig`, or a bare bootstrap string for plain brokers). ``credentials``: the
    pipeline's ZooKeeper identity. ``root``: the ZooKeeper root the pipeline lives under (a chroot in ``zk`` applies first).
    ``lake``: also read the lake's account and compare it with the control state's (:mod:`laminar_kafka.cluster.ops.lake_state`).
    ``topics`` empty: the pipeline's pinned topics (:func:`status_topics`).
    """
    if kafka is None:
        if isinstance(bootstrap, KafkaClientConfig):
            kafka = bootstrap
        elif bootstrap:
            kafka = KafkaClientConfig(bootstrap)
        else:
            raise UsageError("status needs the Kafka bootstrap servers")
    observed_at = time.time()
    # topics asked for: Kafka first, as before the pins (an unreachable Kafka is named first)
    highs = read_kafka(kafka, topics, timeout) if topics else None
    if zk:
        view = read_control(zk, pipeline, timeout, root, credentials, absent_ok=lake is not None)
    elif state_dir is not None:
        view = _read_state_dir(state_dir)
    else:
        raise UsageError("status needs the pipeline's ZooKeeper hosts (--zk, LAMINAR_ZK) or, for an embedded "
                         "pipeline, its state directory (--state-dir, LAMINAR_STATE_DIR)")
    if highs is None:
        highs = read_kafka(kafka, status_topics(topics, view.topics_pin, pipeline), timeout)
    status = build_status(
        pipeline=pipeline, source_identity=source_identity, members=view.members, leader=view.leader,
        snapshot=view.snapshot or AssignmentSnapshot.initial(), manifest=view.manifest, high_watermarks=highs,
        round_info=view.round_info, observed_at=observed_at, manifest_written_at=view.manifest_written_at,
    )
    if lake is None:
        return status
    state = read_lake_state(lake, sorted({t for t, _ in highs}), source_identity, view.manifest, control_read=True)
    return replace(status, lake=state)


def _read_state_dir(state_dir: str) -> ControlView:
    """An embedded pipeline (`LocalCoordinator` files) through its store, read only
    (:meth:`~laminar_kafka.coordinator.local.store.LocalStore.load`): the register of ``state.json``
    and the newest manifest file (the commit point, which the register adopts)."""
    from pathlib import Path

    from laminar_kafka.coordinator.errors import CoordinatorError
    from laminar_kafka.coordinator.local.store import LocalStore

    directory = Path(state_dir)
    if not (directory / "state.json").is_file():
        raise UsageError(f"{state_dir!r} holds no embedded pipeline state (state.json)")
    store = LocalStore(directory)
    try:
        store.load()
        return _control_view(store, one_process=True)
    except (OSError, CoordinatorError) as exc:
        raise UsageError(f"cannot read the embedded pipeline state in {state_dir!r}: {exc}", cause=exc) from exc
