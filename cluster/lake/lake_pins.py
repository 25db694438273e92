"""The pinned settings kept in the lake as well: ``<output>/_laminar/pins/<pipeline>.json``.

The coordinator holds a pipeline's pins (:mod:`laminar_kafka.cluster.lake.pins`). When its state is
lost (a ZooKeeper subtree deleted, an ensemble replaced by an empty one, an embedded state
directory wiped), the first node to start pins *its own* values again, and the pipeline reseeds from
the lake (docs/settings.md). If that node's configuration drifted meanwhile (another ``partition-by``,
``format``, ``topic`` or ``source-identity``), the lake would then hold two layouts, or rows of two
shapes, with nothing to say so: the Iceberg table's own spec catches a changed ``partition-by``, a
Parquet tree catches nothing. So the lake keeps the settings that define its data too, and every
start compares them before it reconciles with the lake and pins anything (:meth:`LakePins.check`,
beside the coordinator's read-only check), so a drifted node refused here has reseeded and pinned
nothing, and the right configuration starts as before:

- absent (a new lake, or one written before this file existed): nothing to compare; once the
  coordinator's pins agree, :meth:`LakePins.keep` writes this node's values;
- equal: nothing to do;
- different: the node stops before it reads a record, in one line naming the setting, both values
  and where the pipeline's value is kept (:class:`~laminar_kafka.errors.ConfigurationError`, exit 2).

The routing settings (``table-template``, ``table-topic-regex``, ``table-allowed``) and
``upsert-keys`` are kept too; a file written before they existed lacks them, and an absent one is
not compared.
``output`` is not among them (the file lives in the output), nor ``vnode-count`` (routing, not data:
a pipeline reseeded from the lake may take another). The file is written through a temporary name
and a move (whole or absent on an object store too); two nodes racing to write it write the same
values, which the coordinator's create-once pins made agree. Encoding: canonical JSON,
``format_version`` 1, decoded strictly (:mod:`laminar_kafka.coordinator.codec`).
"""
from __future__ import annotations

import logging
import posixpath
import uuid
from collections.abc import Mapping

import pyarrow.fs as pafs

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.pins import Mismatch, compare, mismatch_message
from laminar_kafka.coordinator.base import Coordinator
from laminar_kafka.coordinator.codec import dumps, expect_int, expect_object, expect_str, loads
from laminar_kafka.coordinator.errors import CodecError
from laminar_kafka.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["LAKE_PINNED_SETTINGS", "LakePins", "lake_pins_path"]

#: the pinned settings that define the lake's data, kept in the lake
LAKE_PINNED_SETTINGS: tuple[str, ...] = ("topic", "table-format", "partition-by", "format", "source-identity")
#: kept when the node has them; a file written before they existed lacks them (then not compared)
LAKE_PINNED_OPTIONAL: tuple[str, ...] = ("table-template", "table-topic-regex", "table-allowed", "upsert-keys")
PINS_DIR = "_laminar/pins"
FORMAT_VERSION = 1
KEPT_IN_THE_LAKE = "kept in its lake"


def lake_pins_path(pipeline: str) -> str:
    """Where ``pipeline``'s pins are, relative to the output root."""
    return f"{PINS_DIR}/{pipeline}.json"


def encode(pipeline: str, values: Mapping[str, str]) -> bytes:
    kept = [name for name in LAKE_PINNED_SETTINGS + LAKE_PINNED_OPTIONAL if name in values]
    return dumps({"format_version": FORMAT_VERSION, "pipeline": pipeline,
                  "settings": {name: values[name] for name in kept}})


def decode(raw: bytes, what: str) -> tuple[str, dict[str, str]]:
    """``(pipeline, settings)`` of a pins file; :class:`CodecError` naming ``what`` otherwise."""
    body = expect_object(loads(raw, what), what, ("format_version", "pipeline", "settings"))
    version = expect_int(body["format_version"], f"{what}: format_version")
    if version != FORMAT_VERSION:
        raise CodecError(f"{what}: format_version {version} is not {FORMAT_VERSION}")
    settings = expect_object(body["settings"], f"{what}: settings", LAKE_PINNED_SETTINGS, LAKE_PINNED_OPTIONAL)
    return (expect_str(body["pipeline"], f"{what}: pipeline", nonempty=True),
            {name: expect_str(value, f"{what}: settings.{name}") for name, value in settings.items()})


class LakePins:
    """The lake's copy of the pins: :meth:`check` runs with the coordinator's read-only check, before
    the start reconciles with the lake; :meth:`keep` after :class:`~laminar_kafka.cluster.lake.pins.PipelinePins`
    pinned (both blocking, at every start, given the coordinator).
    :class:`ConfigurationError` on a mismatch, :class:`SinkError` when the lake cannot be read or written
    (the node's start fails in one line, as for any lake I/O)."""

    def __init__(self, fs: pafs.FileSystem, root: str, pipeline: str, values: Mapping[str, str]) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.pipeline = pipeline
        self.values = {name: values[name] for name in LAKE_PINNED_SETTINGS + LAKE_PINNED_OPTIONAL if name in values}
        self.path = self._join(lake_pins_path(pipeline))

    def _join(self, relative: str) -> str:
        return f"{self.root}/{relative}" if self.root else relative

    def read(self) -> dict[str, str] | None:
        """The pins the lake keeps (None: none yet). Raises :class:`SinkError`."""
        try:
            with self.fs.open_input_stream(self.path) as stream:
                raw = stream.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SinkError(f"cannot read the pipeline's pins at {self.path}: {exc}", cause=exc) from exc
        try:
            pipeline, settings = decode(raw, f"pins {self.path}")
        except CodecError as exc:
            raise SinkError(str(exc), cause=exc) from exc
        if pipeline != self.pipeline:
            raise SinkError(f"pins {self.path} are pipeline {pipeline}'s, not {self.pipeline}'s")
        return settings

    def write(self) -> None:
        tmp = self._join(f"{PINS_DIR}/.{self.pipeline}.{uuid.uuid4().hex}.tmp")
        try:
            self.fs.create_dir(posixpath.dirname(self.path), recursive=True)
            with self.fs.open_output_stream(tmp) as out:
                out.write(encode(self.pipeline, self.values))
            self.fs.move(tmp, self.path)
        except OSError as exc:
            raise SinkError(f"cannot write the pipeline's pins at {self.path}: {exc}", cause=exc) from exc

    def check(self, _coordinator: Coordinator) -> None:
        """Refuse when the lake keeps other values (nothing kept: no mismatch). Read-only."""
        stored = self.read()
        if stored is None:
            return
        mismatches = [Mismatch(m.setting, m.here, m.pipeline, KEPT_IN_THE_LAKE)
                      for m in compare(self.values, stored)]
        if mismatches:
            raise ConfigurationError(mismatch_message(self.pipeline, mismatches))

    def keep(self, _coordinator: Coordinator) -> None:
        """Write this node's values when the lake keeps none (after the coordinator's pins agreed)."""
        if self.read() is None:
            self.write()
            logger.info("pipeline %s: settings kept in the lake (%s)", self.pipeline, self.path)
