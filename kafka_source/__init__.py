"""The LaminarDB source-connector protocol in Python and its splittable Kafka implementation."""
from __future__ import annotations
