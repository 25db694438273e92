"""Vnode assignment: pure registry, routing, placement and round identities, plus coordinators."""
from __future__ import annotations
