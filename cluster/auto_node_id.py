"""``node-id = auto`` at a node's start: the rule of :mod:`laminar_kafka.cluster.node_identity` with
its I/O, the state file in ``state-dir`` and the claim in ZooKeeper
(:mod:`laminar_kafka.coordinator.zk.node_ids`).

:func:`choose_node_id` logs one INFO line saying which id it took and why, and raises every error as
one line (:class:`~laminar_kafka.cluster.errors.UsageError`): ZooKeeper unreachable or refusing the
credentials, the state file unreadable, or a host name's ordinal held by a live node of another
identity (two nodes never share an id: the refusal names ``--node-id auto`` and the holder).
"""
from __future__ import annotations

import logging
import uuid
from pathlib import Path

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from laminar_kafka.cluster.config import NodeSettings
from laminar_kafka.cluster.errors import UsageError
from laminar_kafka.cluster.node import coordinator_config
from laminar_kafka.cluster.node_identity import (
    NodeIdChoice,
    NodeIdPlan,
    NodeIdScheme,
    StateFile,
    host_identity,
    plan_node_id,
    state_file_name,
    token_identity,
)
from laminar_kafka.coordinator.errors import AccessDeniedError, CoordinatorError, NodeIdTaken
from laminar_kafka.coordinator.layout import NodeIdClaim
from laminar_kafka.coordinator.local.store import write_durable
from laminar_kafka.coordinator.zk.node_ids import ClaimedNodeId, ClaimOutcome, claim_in_pipeline

logger = logging.getLogger(__name__)

__all__ = ["choose_node_id"]


def choose_node_id(settings: NodeSettings, host: str, timeout: float = 10.0) -> NodeIdChoice:
    """The id of a node started with ``node-id auto`` on the host named ``host``: embedded, 1; a host
    name with an ordinal, ordinal + 1, claimed for the host name; otherwise the id claimed for the
    node's identity (its state file's when ``state-dir`` is set, which then records the id; else its
    host name). Logs one INFO line; :class:`UsageError` (one line) on failure."""
    plan = plan_node_id(host, embedded=settings.embedded)
    if plan.scheme is NodeIdScheme.EMBEDDED:
        assert plan.node_id is not None
        choice = NodeIdChoice(plan.node_id, plan.scheme, plan.describe())
    else:
        state_path = Path(settings.state_dir) / state_file_name(settings.pipeline) if settings.state_dir else None
        state = _open_state(state_path, settings.pipeline) if state_path and plan.scheme is NodeIdScheme.ALLOCATED else None
        identity = state.identity if state is not None else host_identity(host)
        preferred = state.node_id if state is not None else None
        claimed = _claim(settings, plan, NodeIdClaim(identity, host.strip().lower()), preferred, timeout)
        if state is not None and state_path is not None and state.node_id != claimed.node_id:
            _write_state(state_path, StateFile(state.identity, state.pipeline, claimed.node_id))
        reason = _reason(plan, identity, claimed, preferred, state_path if state is not None else None)
        choice = NodeIdChoice(claimed.node_id, plan.scheme, reason, identity)
    logger.info("%s", choice.log_line())
    return choice


def _claim(settings: NodeSettings, plan: NodeIdPlan, claim: NodeIdClaim, preferred: int | None,
           timeout: float) -> ClaimedNodeId:
    try:
        return claim_in_pipeline(coordinator_config(settings), claim, wanted=plan.node_id, preferred=preferred,
                                 timeout=timeout)
    except NodeIdTaken as exc:
        raise UsageError(f"--node-id auto: {plan.describe()}, but {exc}; or give this node an explicit --node-id",
                         cause=exc) from exc
    except AccessDeniedError as exc:
        raise UsageError(f"{exc} (zk-auth)", cause=exc) from exc
    except (CoordinatorError, KazooException, KazooTimeoutError) as exc:
        raise UsageError(f"--node-id auto: cannot claim a node id in ZooKeeper at {settings.zk}: {exc}",
                         cause=exc) from exc


def _reason(plan: NodeIdPlan, identity: str, claimed: ClaimedNodeId, preferred: int | None,
            state_path: Path | None) -> str:
    """One sentence: the scheme, then what ZooKeeper said."""
    known_by = f"{identity} (state file {state_path})" if state_path is not None else identity
    if claimed.outcome is ClaimOutcome.KEPT:
        how = f"the id ZooKeeper holds for {known_by} since an earlier start"
    elif plan.scheme is NodeIdScheme.ORDINAL:
        how = f"claimed for {known_by}"
    elif preferred == claimed.node_id:
        how = f"the id the state file recorded, claimed again for {known_by}"
    else:
        how = f"the smallest free id, claimed for {known_by}"
    return f"{plan.describe()}; {how}"


def _open_state(path: Path, pipeline: str) -> StateFile:
    """The node's state file, created with a new identity (durably, before any claim) when absent."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        state = StateFile(token_identity(uuid.uuid4().hex), pipeline)
        _write_state(path, state)
        return state
    except OSError as exc:
        raise UsageError(f"--node-id auto: cannot read the state file {path}: {exc.strerror or exc}", cause=exc) from exc
    state = StateFile.from_json(raw, str(path))
    if state.pipeline != pipeline:
        raise UsageError(f"--node-id auto: the state file {path} belongs to pipeline {state.pipeline!r}, "
                         f"not {pipeline!r}")
    return state


def _write_state(path: Path, state: StateFile) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_durable(path, state.to_json())
    except OSError as exc:
        raise UsageError(f"--node-id auto: cannot write the state file {path}: {exc.strerror or exc}",
                         cause=exc) from exc
