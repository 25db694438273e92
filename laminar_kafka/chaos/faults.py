"""The fault kinds of the chaos campaign: one small class per kind, in :data:`FAULTS`.

A fault's :meth:`Fault.inject` resolves the event's target role (a random node, the leader, a drain
donor or recipient, the busiest broker, the ZooKeeper leader...), applies the fault and returns an
:class:`Injection`: the moment the fault really hit (``at``: for a kill inside a round, the kill,
not the join that started the round), an optional ``heal`` to call ``heal_after_s`` later, details
for the report, and partitions that appeared because of the fault (their first record must become
durable before the fault counts as recovered). Every wait is bounded and polls; nothing sleeps
longer than the event asks for.

The kinds live in :mod:`laminar_kafka.chaos.faults_nodes` (processes and sessions),
:mod:`laminar_kafka.chaos.faults_infra` (topics, servers, network, producer, output, the object store
and the catalog),
:mod:`laminar_kafka.chaos.faults_state` (control state lost, replaced or rolled back, the lake rolled back,
a misconfigured node) and :mod:`laminar_kafka.chaos.cdc.faults` (the CDC pipeline's upserts); what they
share in :mod:`laminar_kafka.chaos.fault_api`.
"""
from __future__ import annotations

from laminar_kafka.chaos.cdc.faults import CompactDuringUpserts, HotKeys, KillCommitter, MoveHotPartition
from laminar_kafka.chaos.fault_api import Fault, FaultContext, Injection, TopicBook
from laminar_kafka.chaos.faults_infra import (
    AbortBurst,
    AddPartitions,
    BrokerFreeze,
    BrokerKill,
    CatalogSlow,
    LakeServiceCut,
    LakeServiceRestart,
    NetworkCut,
    NewTopic,
    OutputFault,
    SlowLinks,
    ZooKeeperKill,
)
from laminar_kafka.chaos.faults_nodes import Churn, Join, LeaderKill, Leave, NodeKill, RoundKill, SessionExpiry, Zombie
from laminar_kafka.chaos.faults_state import (
    LakeRollback,
    MisconfiguredNode,
    ZooKeeperReplaced,
    ZooKeeperRollback,
    ZooKeeperSubtreeLost,
)
from laminar_kafka.chaos.kinds import ALL_KINDS

__all__ = ["FAULTS", "Fault", "FaultContext", "Injection", "TopicBook"]


FAULTS: dict[str, Fault] = {f.kind: f for f in (
    NodeKill(), LeaderKill(), RoundKill("kill-donor"), RoundKill("kill-recipient"), Zombie(), Leave(), Join(),
    Churn(), SessionExpiry(), AddPartitions(), NewTopic(), BrokerKill(), BrokerFreeze(), ZooKeeperKill("zk-kill"),
    ZooKeeperKill("zk-quorum-loss"), NetworkCut("net-zk", "zookeeper"), NetworkCut("net-kafka", "kafka"),
    SlowLinks(), AbortBurst(), OutputFault("output-readonly"), OutputFault("output-full"),
    ZooKeeperSubtreeLost(), ZooKeeperReplaced(), ZooKeeperRollback(), LakeRollback(), MisconfiguredNode(),
    LakeServiceRestart("store-restart"), LakeServiceCut("store-unreachable"), LakeServiceRestart("catalog-restart"),
    LakeServiceCut("catalog-unreachable"), CatalogSlow(), KillCommitter(), CompactDuringUpserts(), HotKeys(),
    MoveHotPartition(),
)}

if set(FAULTS) != set(ALL_KINDS):  # pragma: no cover - a programming error, caught by the unit tests
    raise RuntimeError(f"fault kinds {sorted(set(FAULTS) ^ set(ALL_KINDS))} have no plan or no fault")
