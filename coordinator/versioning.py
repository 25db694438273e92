"""The installed distribution's version, looked up on first use.

``importlib.metadata`` scans every distribution on ``sys.path`` and imports the ``email`` package
(about 60 ms of CPU at start); the packages' ``__version__`` is therefore resolved lazily through
a module ``__getattr__`` that calls :func:`installed_version`.
"""
from __future__ import annotations

import functools

__all__ = ["DISTRIBUTION", "installed_version"]

DISTRIBUTION = "laminar-kafka"


@functools.cache
def installed_version() -> str:
    """The version of the installed ``laminar-kafka`` distribution; ``0+unknown`` in a source
    checkout that is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"
