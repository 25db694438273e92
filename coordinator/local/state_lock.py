"""One embedded node per state directory: an exclusive ``flock`` on ``<directory>/lock``.

An embedded pipeline has no session that could fence a second process, so two ``laminar-kafka run``
processes started on one output (a service restarted while the old process still runs, the same
command in two terminals) would each read the same manifest, consume every partition and land every
record twice. :class:`StateDirectoryLock` makes the second one fail at start instead, naming the
holder (its pid, host and start time, written into the lock file).

The lock is the kernel's: it goes with the process, so a node killed with SIGKILL leaves no stale
lock and its restart takes it at once. ``flock`` locks are per open file, so a second lock in the
same process is refused too. The state directory is local (see ``NodeSettings.effective_state_dir``).
"""
from __future__ import annotations

import datetime as dt
import fcntl
import os
import socket
from pathlib import Path

from laminar_kafka.coordinator.errors import CoordinatorError
from laminar_kafka.errors import ConfigurationError

__all__ = ["LOCK_NAME", "StateDirectoryInUse", "StateDirectoryLock"]

LOCK_NAME = "lock"


class StateDirectoryInUse(CoordinatorError, ConfigurationError):
    """Another live process holds the embedded state directory's lock (a bad setting, and one the
    coordinator's callers catch as theirs)."""


class StateDirectoryLock:
    """The exclusive lock of one state directory, held from :meth:`acquire` to :meth:`release`
    (or the end of the process). Not thread-safe: one owner."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock (creating the directory), or raise :class:`StateDirectoryInUse`; any other
        failure (a directory not writable, a filesystem without ``flock``) is a
        :class:`~laminar_kafka.coordinator.errors.ConfigurationError` naming the path."""
        if self._fd is not None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigurationError(f"cannot open the state directory's lock {self.path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise StateDirectoryInUse(
                f"state directory {self.path.parent} is in use by another embedded node ({holder}): an embedded "
                "pipeline runs one node at a time; stop that one, or run several nodes with --zk"
            ) from None
        except OSError as exc:  # e.g. ENOLCK: a network filesystem without flock
            os.close(fd)
            raise ConfigurationError(
                f"cannot lock the state directory {self.path.parent} ({exc}): use a local state-dir"
            ) from exc
        except BaseException:  # close the file, then re-raised
            os.close(fd)
            raise
        started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {started}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Give the lock up (the file stays; its content is only a hint)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "holder unknown"
