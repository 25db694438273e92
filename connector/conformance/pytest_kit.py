"""The conformance scenarios as pytest tests.

In a test module, define a fixture ``conformance_kit`` that yields a
:class:`~laminar_kafka.connector.conformance.ConnectorKit` (a fresh log for each test), then::

    from laminar_kafka.connector.conformance.pytest_kit import conformance_tests

    conformance_tests(globals())

Each scenario becomes ``test_conformance_<rule>`` (``pytest -k conformance`` runs them all); a
scenario the backend cannot run (advisory commits it cannot observe) is skipped with the reason.
A thread that dies of an unhandled exception during a test fails it too
(``PytestUnhandledThreadExceptionWarning`` as an error): a connector's threads must end cleanly,
closing what they own, whatever the scenario did to its generation (a cancelled call included).
The tests are coroutines: run them with pytest-asyncio in auto mode (or mark the module).
"""
from __future__ import annotations

from collections.abc import Callable, Coroutine, MutableMapping
from typing import Any

import pytest

from laminar_kafka.connector.conformance.backend import ConformanceSkipped, ConnectorKit
from laminar_kafka.connector.conformance.scenarios import SCENARIOS, Scenario

__all__ = ["THREADS_END_CLEANLY", "conformance_tests"]

#: the mark every conformance test carries: a thread dying of an unhandled exception fails it
THREADS_END_CLEANLY = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


def conformance_tests(namespace: MutableMapping[str, Any]) -> list[str]:
    """Add one test per scenario to ``namespace`` (a test module's ``globals()``); their names."""
    names = []
    for rule, scenario in SCENARIOS.items():
        test = _test_of(scenario)
        test.__name__ = test.__qualname__ = f"test_conformance_{rule.replace('-', '_')}"
        test.__doc__ = f"{rule}: {scenario.rule}"
        test = THREADS_END_CLEANLY(test)
        namespace[test.__name__] = test
        names.append(test.__name__)
    return names


def _test_of(scenario: Scenario) -> Callable[[ConnectorKit], Coroutine[Any, Any, None]]:
    async def test(conformance_kit: ConnectorKit) -> None:
        try:
            await scenario.check(conformance_kit)
        except ConformanceSkipped as exc:
            pytest.skip(str(exc))

    return test
