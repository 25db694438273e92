"""The settings that define a pipeline's data, pinned create-once at its first start (docs/settings.md).

What lands where, and how it is routed, must not change under a running pipeline: the topics or
pattern (``topic``), the output URI (``output``), ``table-format``, ``partition-by``, the record
format (``format``, ``debezium-json`` included), ``vnode-count``, ``source-identity``, the routing to
tables (``table-template``, ``table-topic-regex``, ``table-allowed``) and the keys of upsert mode
(``upsert-keys``: a keyed table applied by other keys, or appended to, would not be one table). The first node to start pins each one
in the coordinator (``Coordinator.pin_setting("pipeline.<setting>", value)``: ZooKeeper
``settings/``, embedded ``settings.json``); every later start of every node reads the pins and, when
one differs from its own setting, stops before it reads a record or stages a file, with one line
(:class:`~laminar_kafka.errors.ConfigurationError`: exit 2)::

    setting vnode-count is 64 here, but pipeline orders was created with 256 (pinned at its first
    start); start this node with --vnode-count 256

Values are compared in a normal form (:func:`pipeline_values`): the output as an absolute path
(``./lake``, ``/abs/lake`` and ``file:///abs/lake`` are one output) or a URI without credentials,
query or trailing slash; topic names and upsert keys as sorted sets (``b,a`` is ``a,b``; the keys of a table are a set, its
identifier fields); a pattern as its text
(``re:<regex>``). The JSON schema inferred for ``format=json`` is pinned by
:mod:`laminar_kafka.cluster.lake.schema_pin`, which runs after this check (:func:`chain_pins`), so a node with a wrong
setting never samples the topics.

Pipelines created before these pins existed have none: the first node that starts after the upgrade
pins its own values (each absent pin is written create-once, so of two nodes racing, one value wins
and the other node is refused). Their ``vnode-count`` is also checked against the published
assignment, whose vnode count is the pipeline's whatever was pinned, so an upgraded pipeline
cannot be pinned with a wrong vnode count.
"""
from __future__ import annotations

import logging
import os
import posixpath
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from laminar_kafka.cluster.config import NodeSettings
from laminar_kafka.coordinator.base import Coordinator
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.topics import PATTERN_PREFIX, TopicSelector
from laminar_kafka.kafka_source.config.values import parse_upsert_keys

logger = logging.getLogger(__name__)

__all__ = [
    "PINNED_SETTINGS", "Mismatch", "PipelinePins", "chain_pins", "compare", "mismatch_message",
    "normalise_output", "normalise_topics", "pin_name", "pipeline_values",
]

#: The settings pinned at a pipeline's first start, in the order a mismatch is reported.
PINNED_SETTINGS: tuple[str, ...] = (
    "topic", "output", "table-format", "partition-by", "format", "vnode-count", "source-identity",
    "table-topic-regex", "table-allowed", "table-template", "upsert-keys",
)
#: where a pin comes from, as the message says it
PINNED_AT_FIRST_START = "pinned at its first start"
PUBLISHED_ASSIGNMENT = "the vnode count of its published assignment"


def pin_name(setting: str) -> str:
    """The coordinator's name of ``setting``'s pin (``vnode-count`` -> ``pipeline.vnode-count``)."""
    return f"pipeline.{setting}"


def normalise_output(output: str) -> str:
    """One text per output location: a local path (or ``file://`` URI) as its absolute normal path;
    another URI as ``scheme://host/path`` without user, password, query or trailing slash (they hold
    credentials and connection options, not the location, and a pin is never a secret)."""
    text = output.strip()
    if "://" not in text:
        return posixpath.normpath(os.path.abspath(os.path.expanduser(text)))
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme == "file":
        return posixpath.normpath(os.path.abspath(unquote(parts.path) or "/"))
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    path = posixpath.normpath(parts.path) if parts.path.strip("/") else ""
    return f"{scheme}://{host}{path}"


def normalise_topics(topics: tuple[str, ...] | str) -> str:
    """``re:<regex>`` as given; topic names sorted and comma-joined."""
    text = topics if isinstance(topics, str) else ",".join(topics)
    selector = TopicSelector.parse(text)
    if selector.pattern is not None:
        return f"{PATTERN_PREFIX}{selector.pattern}"
    return ",".join(sorted(selector.names))


def pipeline_values(settings: NodeSettings) -> dict[str, str]:
    """This node's value of every pinned setting, in normal form (pure)."""
    return {
        "topic": normalise_topics(settings.topics),
        "output": normalise_output(settings.output),
        "table-format": settings.table_format,
        "partition-by": settings.partitioning.text,
        "format": settings.format,
        "vnode-count": str(settings.vnode_count),
        "source-identity": settings.source_identity,
        "table-template": settings.table_template,
        "table-topic-regex": settings.table_topic_regex,
        "table-allowed": settings.table_allowed,
        "upsert-keys": ",".join(sorted(parse_upsert_keys(settings.upsert_keys or ""))),
    }


@dataclass(frozen=True)
class Mismatch:
    """A setting whose value here differs from the pipeline's."""

    setting: str
    here: str
    pipeline: str
    origin: str = PINNED_AT_FIRST_START


def compare(here: Mapping[str, str], pinned: Mapping[str, str | None],
            assignment_vnodes: int | None = None) -> list[Mismatch]:
    """Every setting of ``here`` (normal form) whose pin in ``pinned`` differs, in
    :data:`PINNED_SETTINGS` order; an absent (or None) pin is no mismatch (the first start, or a
    pipeline created before the pins). ``assignment_vnodes``: the vnode count of the pipeline's
    published assignment (None: none published yet), checked when the ``vnode-count`` pin agrees or
    is absent. Pure."""
    found: list[Mismatch] = []
    order = [s for s in PINNED_SETTINGS if s in here] + sorted(s for s in here if s not in PINNED_SETTINGS)
    for setting in order:
        value, stored = here[setting], pinned.get(setting)
        if stored is not None and stored != value:
            found.append(Mismatch(setting, value, stored))
        elif setting == "vnode-count" and assignment_vnodes is not None and str(assignment_vnodes) != value:
            found.append(Mismatch(setting, value, str(assignment_vnodes), PUBLISHED_ASSIGNMENT))
    return found


def mismatch_message(pipeline: str, mismatches: list[Mismatch]) -> str:
    """The one line naming the first mismatch (and the names of the others). Pure."""
    first = mismatches[0]
    line = (f"setting {first.setting} is {first.here} here, but pipeline {pipeline} was created with "
            f"{first.pipeline} ({first.origin}); start this node with --{first.setting} {shlex.quote(first.pipeline)}")
    if len(mismatches) > 1:
        line += f" (also differing: {', '.join(m.setting for m in mismatches[1:])})"
    return line


class PipelinePins:
    """The pinning callable (``NodeRuntime(pin_settings=...)``): called with the started coordinator
    at every start, before anything is read; raises :class:`ConfigurationError` on a mismatch."""

    def __init__(self, pipeline: str, values: Mapping[str, str]) -> None:
        self.pipeline = pipeline
        self.values = dict(values)

    @classmethod
    def of(cls, settings: NodeSettings) -> PipelinePins:
        return cls(settings.pipeline, pipeline_values(settings))

    def check(self, coordinator: Coordinator) -> None:
        """Blocking, read-only: refuse on a mismatch with what is pinned (nothing pinned: no
        mismatch). Runs before the node reconciles the control state with the lake, so a node
        pointed at another output (an empty lake) never reseeds the pipeline's control state."""
        stored = {setting: coordinator.pin_setting(pin_name(setting), None) for setting in self.values}
        self._check(compare(self.values, stored))

    def __call__(self, coordinator: Coordinator) -> None:
        """Blocking: read every pin; refuse on a mismatch (nothing written); pin the absent ones
        create-once, and refuse if another node won one of them with another value."""
        stored = {setting: coordinator.pin_setting(pin_name(setting), None) for setting in self.values}
        snapshot = coordinator.assignment()
        vnodes = snapshot.vnode_count if snapshot.version > 0 else None
        self._check(compare(self.values, stored, vnodes))
        absent = [setting for setting, value in stored.items() if value is None]
        for setting in absent:
            stored[setting] = coordinator.pin_setting(pin_name(setting), self.values[setting])
        self._check(compare(self.values, stored, vnodes))
        if absent:
            logger.info("pipeline %s: settings pinned (%s)", self.pipeline,
                        ", ".join(f"{s}={self.values[s]}" for s in absent))
        else:
            logger.info("pipeline %s: settings agree with the pinned ones", self.pipeline)

    def _check(self, mismatches: list[Mismatch]) -> None:
        if mismatches:
            raise ConfigurationError(mismatch_message(self.pipeline, mismatches))


def chain_pins(*pins: Callable[[Coordinator], None] | None) -> Callable[[Coordinator], None]:
    """One ``pin_settings`` callable running ``pins`` (None ones skipped) in order."""
    chosen = [pin for pin in pins if pin is not None]

    def pin_all(coordinator: Coordinator) -> None:
        for pin in chosen:
            pin(coordinator)

    return pin_all
