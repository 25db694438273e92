"""LocalStore: the :class:`~laminar_kafka.coordinator.store.ControlStore` of one embedded process, on local files.

It is a :class:`~laminar_kafka.coordinator.local.memory_store.MemoryStore` (acks, drain receipts, decisions and rejection
markers live in memory: one process, a restart reopens the epoch) whose durable records are files in
``directory``::

    manifest-<epoch:020d>.json   one committed manifest per file (the truth for recovery); epoch 0 is
                                 the pinned initial manifest (create-once, never garbage-collected)
    state.json                   the register (ControlState JSON), rewritten by each step
    topics.json                  {topic: Kafka topic id}, each entry create-once (pin_topic_ids)
    settings.json                {name: value}, each entry create-once (pin_setting)

Every file is written by :func:`write_durable`. A manifest file is the commit point of its epoch: a
step writes it before the register that records it, and :meth:`LocalStore.recover` adopts a manifest
newer than the register's ``last_epoch``. A crash between the temporary write and the rename leaves
the previous files intact; leftover ``*.tmp`` files are removed on recovery. Members are not fenced
(one process): views carry no member fences.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.codec import expect_str, loads
from laminar_kafka.coordinator.engine.steps import MemberFence, Step
from laminar_kafka.coordinator.errors import CodecError
from laminar_kafka.coordinator.local.memory_store import MemoryStore
from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.store import Leadership, StoredManifest
from laminar_kafka.coordinator.values import Manifest

__all__ = ["LocalStore", "write_durable"]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(path: Path, data: bytes, before_rename: Callable[[Path], None] | None = None) -> None:
    """Atomically replace ``path`` with ``data``: temp file, fsync, rename, fsync the directory.

    After it returns the content survives a crash; if the process dies inside it, ``path`` holds
    either its previous content or the new one, never a mix. ``before_rename(path)`` runs once the
    temporary file is durable, before the rename (crash tests inject a kill there).
    """
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    if before_rename is not None:
        before_rename(path)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class LocalStore(MemoryStore):
    """See the module docstring. Thread-safe."""

    def __init__(self, directory: Path, before_rename: Callable[[Path], None] | None = None) -> None:
        super().__init__()
        self.directory = directory
        self._before_rename = before_rename
        self._manifests: dict[int, Manifest] = {}

    def _write(self, path: Path, data: bytes) -> None:
        write_durable(path, data, self._before_rename)

    def manifest_path(self, epoch: int) -> Path:
        return self.directory / f"manifest-{epoch:020d}.json"

    def manifest_epochs(self) -> list[int]:
        epochs = []
        for path in self.directory.glob("manifest-*.json"):
            stem = path.name[len("manifest-"):-len(".json")]
            if stem.isdigit():
                epochs.append(int(stem))
        return sorted(epochs)

    def recover(self) -> None:
        """Remove the leftover temporary files, then :meth:`load` (see the module docstring)."""
        with self.lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            for tmp in self.directory.glob("*.tmp"):
                tmp.unlink()
            self.load()

    def load(self) -> None:
        """Load the register from the files, writing nothing (an observer in another process, such as
        ``status``, reads the directory this way): a manifest newer than the register's ``last_epoch``
        is adopted (the manifest is the commit point); the open epoch and the round in progress died
        with the process that wrote them. No register when ``state.json`` does not exist."""
        with self.lock:
            state = self.directory / "state.json"
            control = ControlState.from_json(state.read_bytes()) if state.exists() else None
            epochs = self.manifest_epochs()
            if control is not None and epochs and epochs[-1] > control.last_epoch:
                # The manifest is the commit point; the register write after it was lost.
                control = replace(control, open_epoch=0, last_epoch=epochs[-1])
            if control is not None and control.open_epoch:
                control = replace(control, open_epoch=0)  # acks lived in memory: reopen later
            if control is not None and control.round is not None:
                control = replace(control, round=None)  # drains died with the previous process
            if control is not None:
                self.nodes[layout.ASSIGNMENT] = (control.to_json(), 0)

    def view_fences(self) -> Mapping[int, MemberFence] | None:
        return None

    def apply(self, term: Leadership, step: Step, expected_version: int) -> None:
        """Validate, then persist (manifest first: the commit point; then the register), then expose."""
        with self.lock:
            creates = self.validate(term, step, expected_version)
            manifest = step.manifest
            if manifest is not None:
                self._write(self.manifest_path(manifest.epoch), manifest.to_json())
                self._manifests[manifest.epoch] = manifest
            self._write(self.directory / "state.json", step.control.to_json())
            self.write(creates, step)

    def collect_garbage(self, term: Leadership, control: ControlState, keep: int) -> None:
        """Also delete manifest files beyond the last ``keep``; never the pinned initial manifest."""
        super().collect_garbage(term, control, keep)
        with self.lock:
            for epoch in self.manifest_epochs():
                if 0 < epoch <= control.last_epoch - keep:
                    self.manifest_path(epoch).unlink(missing_ok=True)
                    self._manifests.pop(epoch, None)

    def read_manifest(self, epoch: int) -> Manifest | None:
        with self.lock:
            cached = self._manifests.get(epoch)
            if cached is not None:
                return cached
            try:
                manifest = Manifest.from_json(self.manifest_path(epoch).read_bytes())
            except FileNotFoundError:
                return None
            self._manifests[epoch] = manifest
            return manifest

    def read_stored_manifest(self, epoch: int) -> StoredManifest | None:
        """Manifest ``epoch``'s file as it is now, with its mtime (never the cache: the time is the file's)."""
        path = self.manifest_path(epoch)
        try:
            data = path.read_bytes()
            written_at = path.stat().st_mtime
        except FileNotFoundError:
            return None
        return StoredManifest(Manifest.from_json(data), written_at)

    def pin_initial(self, manifest: Manifest) -> Manifest:
        """``manifest-00000000000000000000.json``, create-once."""
        with self.lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            stored = self.read_manifest(0)
            if stored is None:
                self._write(self.manifest_path(0), manifest.to_json())
                self._manifests[0] = stored = manifest
            return stored

    def reset(self, seed: Manifest) -> None:
        """The register file first (without it nothing below is read as committed), then every manifest
        file; then the seed's manifest and the pinned slot, each durable."""
        with self.lock:
            super().reset(seed)
            self.directory.mkdir(parents=True, exist_ok=True)
            (self.directory / "state.json").unlink(missing_ok=True)
            for epoch in reversed(self.manifest_epochs()):
                self.manifest_path(epoch).unlink(missing_ok=True)
            self._manifests.clear()
            if seed.epoch:
                self._write(self.manifest_path(seed.epoch), seed.to_json())
            self._write(self.manifest_path(0), seed.to_json())
            self._manifests[0] = seed

    def pin_topic_ids(self, ids: Mapping[str, str]) -> dict[str, str]:
        """``topics.json``, each entry create-once."""
        stored = self._pin_entries("topics.json", ids, "id", nonempty=True)
        return {k: stored[k] for k in ids}

    def pin_setting(self, name: str, value: str | None) -> str | None:
        """``settings.json``, each entry create-once."""
        return self._pin_entries("settings.json", {} if value is None else {name: value}, "value",
                                 nonempty=False).get(name)

    def _pin_entries(self, file_name: str, values: Mapping[str, str], what: str, *,
                     nonempty: bool) -> dict[str, str]:
        """Create-once each entry of ``values`` in the JSON object ``file_name``; return every stored
        entry (those of ``values`` as first stored)."""
        path = self.directory / file_name
        with self.lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            try:
                raw = loads(path.read_bytes(), str(path))
            except FileNotFoundError:
                raw = {}
            if not isinstance(raw, dict):
                raise CodecError(f"{path} must hold a JSON object")
            stored = {k: expect_str(v, f"{path}: {what} of {k!r}", nonempty=nonempty) for k, v in raw.items()}
            missing = {k: v for k, v in values.items() if k not in stored}
            if missing:
                stored.update(missing)
                self._write(path, json.dumps(dict(sorted(stored.items()))).encode())
            return stored
