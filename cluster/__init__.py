"""The laminar-kafka node runtime: generations, epochs, drain rounds, the sink, status, verify, metrics, CLI."""
from __future__ import annotations
