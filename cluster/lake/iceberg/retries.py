"""When an Iceberg commit is tried again, and for how long.

A commit that loses a race to another node's (the catalog refuses it) is retried from a reloaded
table, and so is every catalog call while the catalog is unavailable: the reload finds, by the
table's epoch property, a commit whose answer was lost, so a retry never adds files twice.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

__all__ = ["RETRYABLE", "TRANSIENT", "RetryPolicy"]


def _retryable() -> tuple[type[BaseException], ...]:
    kinds: list[type[BaseException]] = [CommitFailedException, CommitStateUnknownException]
    try:
        from sqlalchemy.exc import OperationalError  # "database is locked" under concurrent commits

        kinds.append(OperationalError)
    except ImportError:  # pragma: no cover - sqlalchemy comes with pyiceberg[sql-sqlite]
        pass
    return tuple(kinds)


#: a commit that lost a race (or could not tell): retried from a reloaded table
RETRYABLE = _retryable()


def _transient() -> tuple[type[BaseException], ...]:
    """Failures on the way to a REST catalog: its connection refused, reset or timed out (a catalog
    restarting, a network blip), a 5xx answer to a read. Retried like a lost race, and as safely: the
    retry reloads the table, and the epoch property, set in the same atomic commit as the files, says
    whether a commit whose answer was lost landed (then nothing is added again)."""
    from pyiceberg.exceptions import ServerError, ServiceUnavailableError

    kinds: list[type[BaseException]] = [ServerError, ServiceUnavailableError]
    try:
        import requests

        kinds += [requests.exceptions.ConnectionError, requests.exceptions.Timeout]
    except ImportError:  # pragma: no cover - requests comes with pyiceberg's REST catalog
        pass
    return tuple(kinds)


#: the catalog unavailable for a while: retried as safely as a lost race
TRANSIENT = _transient()


@dataclass(frozen=True)
class RetryPolicy:
    """How long a table commit retries after losing a race: ``attempts`` tries within
    ``deadline_s`` seconds, sleeping a jittered, doubling delay between ``base_delay_s`` and
    ``max_delay_s``."""

    attempts: int = 20
    deadline_s: float = 30.0
    base_delay_s: float = 0.02
    max_delay_s: float = 2.0

    def delay(self, attempt: int) -> float:
        return min(self.max_delay_s, self.base_delay_s * 2 ** attempt) * random.uniform(0.5, 1.5)
