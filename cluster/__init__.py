"""The laminar-kafka node runtime: generations, epochs, drain rounds, the sink, status, verify, metrics, CLI."""
from __future__ import annotations

from coordinator.versioning import installed_version


def __getattr__(name: str) -> str:
    """``__version__``, looked up on first use (:mod:`coordinator.versioning`)."""
    if name == "__version__":
        return installed_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
