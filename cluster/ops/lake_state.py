"""The lake's own account of a pipeline, for the tools (`status`, `verify`): its latest epoch and
cursors, and whether they agree with the control state's.

The lake is the durable truth (docs/settings.md): what it records is what a node continues from when
the control state is lost. An operator sees both sides here before anything acts on them; the
verdict is :func:`laminar_kafka.cluster.lake.reconcile.reconcile`'s, as a node would reach it at its next start.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from laminar_kafka.cluster.errors import SinkError, UsageError
from laminar_kafka.cluster.lake.outputs import open_lake
from laminar_kafka.cluster.lake.parquet.sink import open_output
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.reconcile import Action, ControlFacts, OnLakeBehind, reconcile
from laminar_kafka.cluster.lake.settings import LakeTarget
from laminar_kafka.coordinator.errors import CodecError
from laminar_kafka.coordinator.values import Manifest

__all__ = ["LakeState", "read_lake_state"]


@dataclass(frozen=True)
class LakeState:
    """``epoch``: the latest epoch whole in the lake (0: none); ``where``: the record it came from;
    ``cursors``: ``topic:partition`` -> next offset, as the lake records them; ``verdict``: what a node
    starting now would do ("" when the lake and the control state agree, or no control state was read)."""

    epoch: int
    where: str
    cursors: dict[str, int] = field(default_factory=dict)
    verdict: str = ""
    #: pipelines whose records the lake holds instead of the one asked for (a wrong ``--pipeline``?)
    other_pipelines: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"epoch": self.epoch, "where": self.where, "cursors": dict(self.cursors), "verdict": self.verdict}

    def line(self) -> str:
        """One line for a table: the lake's epoch and where it was read, and the verdict if any."""
        text = f"lake: epoch {self.epoch} ({self.where})" if self.epoch else f"lake: no epoch recorded ({self.where})"
        return text + (f"; {self.verdict}" if self.verdict else "")


def read_lake_state(target: LakeTarget, topics: Sequence[str], source_identity: str | None,
                    control: Manifest | None = None, *, control_read: bool = False) -> LakeState:
    """Read the lake of ``target`` for ``topics``; with ``control_read``, compare it with the control
    state's latest manifest ``control`` (None: the control state holds none). The lake may trail a
    running pipeline by the epoch being published: that is no disagreement. Raises :class:`UsageError`
    (one line) when the lake cannot be read or a record does not decode. ``source_identity`` None:
    the cursors of every source identity the lake records."""
    try:
        fs, root = open_output(target.output)
        lake = open_lake(target.table_format, fs, root, output_uri=target.output, pipeline=target.pipeline,
                         partitioning=PartitionSpec(), iceberg=target.iceberg)  # reading: the layout plays no part
        facts = lake.read_facts(target.pipeline, topics)
    except (SinkError, CodecError, OSError) as exc:
        raise UsageError(f"the lake at {target.output} cannot be read: {exc}", cause=exc) from exc
    verdict = ""
    if control_read:
        published = max(0, control.epoch - 1) if control is not None else 0  # one epoch may be in flight
        decision = reconcile(target.pipeline, ControlFacts(control, None, published), facts, {}, OnLakeBehind.FAIL)
        if decision.action is Action.REFUSE:
            verdict = f"DISAGREES: {decision.reason}"
        elif decision.action is Action.RESEED:
            verdict = f"DISAGREES: {decision.reason} (a node starting now reseeds its control state)"
    if source_identity is None:
        cursors = {k: v for c in facts.cursors.values() for k, v in c.items()}
    else:
        cursors = dict(facts.cursors.get(source_identity, {}))
    return LakeState(facts.epoch, facts.where or "nothing recorded", cursors, verdict, tuple(facts.other_pipelines))
