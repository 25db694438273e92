"""The laminar-kafka node runtime: generations, epochs, drain rounds, the sink, status, verify, metrics, CLI."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _distribution_version

try:
    __version__: str = _distribution_version("laminar-kafka")
except PackageNotFoundError:  # a source checkout that is not installed
    __version__ = "0+unknown"
