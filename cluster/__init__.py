"""The laminar-kafka node runtime: generations, epochs, drain rounds, the sink, status, verify, metrics, CLI."""
from __future__ import annotations

from laminar_kafka.coordinator.versioning import installed_version


def __getattr__(name: str) -> str:
    """``__version__``, looked up on first use (:mod:`laminar_kafka.coordinator.versioning`)."""
    if name == "__version__":
        return installed_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
