"""The laminar-kafka node runtime, sink, CLI and the local dev stack of real servers."""
from __future__ import annotations
