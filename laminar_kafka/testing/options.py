"""The plugin's choices, decided from the command line and the environment: pure, no I/O.

- The backend: ``--laminar-backend=process|containers``, else ``LAMINAR_TEST_BACKEND`` (the variable
  the project's own test suite reads: ``local`` means ``process``, ``docker`` means ``containers``),
  else ``process``.
- The Kafka release (process backend): ``--laminar-kafka-version``, else whatever
  ``LAMINAR_KAFKA_VERSION`` says (read by the dev stack itself), else the release the package pins.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

__all__ = ["BACKEND_ENV", "Backend", "PluginOptions", "choose_backend"]

#: the environment variable that chooses the backend when the option is not given
BACKEND_ENV = "LAMINAR_TEST_BACKEND"


class Backend(str, Enum):
    """Where the servers run: local JVM processes, or containers of the project's images."""

    PROCESS = "process"
    CONTAINERS = "containers"


#: every spelling accepted, and the backend it means (the project's suite says local / docker)
_SPELLINGS = {
    "process": Backend.PROCESS, "processes": Backend.PROCESS, "local": Backend.PROCESS,
    "containers": Backend.CONTAINERS, "container": Backend.CONTAINERS, "docker": Backend.CONTAINERS,
}


def choose_backend(option: str | None, environ: Mapping[str, str]) -> Backend:
    """The backend: `option` (the command line) when given, else ``LAMINAR_TEST_BACKEND`` in
    `environ`, else `Backend.PROCESS`. Raises ValueError (one line, the accepted values) for an
    unknown value."""
    for value, source in ((option, "--laminar-backend"), (environ.get(BACKEND_ENV), BACKEND_ENV)):
        if value is None or not value.strip():
            continue
        backend = _SPELLINGS.get(value.strip().lower())
        if backend is None:
            raise ValueError(f"{source}={value!r}: expected process or containers")
        return backend
    return Backend.PROCESS


@dataclass(frozen=True)
class PluginOptions:
    """What a session asked for: the backend and, for the process backend, a Kafka release (None:
    the dev stack's own choice)."""

    backend: Backend
    kafka_version: str | None = None

    def describe(self) -> str:
        """One line for the pytest header."""
        release = f", Kafka {self.kafka_version}" if self.kafka_version else ""
        return f"laminar_kafka.testing: {self.backend.value} backend{release} (servers start when a fixture asks)"
