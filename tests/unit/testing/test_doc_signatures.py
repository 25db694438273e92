"""docs/testing.md's "Fixtures" section states each helper's signature exactly as the code has it:
every ``name(parameters)`` written there in backticks is compared with ``inspect.signature`` of the
callable it documents (parameter names, kinds and defaults; annotations are not in the doc)."""
from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from laminar_kafka.testing import handles, partition, plugin

DOC = Path(__file__).resolve().parents[3] / "docs" / "testing.md"
CALL = re.compile(r"`(\w+)\(([^`]*)\)(?: -> [^`]+)?`")


class FakeRequest:
    """The fixture request the helper factories take; no fixture is ever looked up here."""

    def getfixturevalue(self, name: str) -> Any:
        raise AssertionError(f"{name} looked up")


def _fixture_helper(fixture: Any) -> Callable[..., Any]:
    """The callable a function fixture of the plugin yields (made without starting anything)."""
    made = inspect.unwrap(fixture)(FakeRequest())
    if isinstance(made, Iterator):
        return next(made)  # type: ignore[no-any-return]
    return made  # type: ignore[no-any-return]


def _documented(monkeypatch: pytest.MonkeyPatch) -> dict[str, Callable[..., Any]]:
    monkeypatch.setattr(partition, "partition_available", lambda: (True, ""))
    return {
        "unique_topic": _fixture_helper(plugin.unique_topic),
        "produce_records": _fixture_helper(plugin.produce_records),
        "consume_records": _fixture_helper(plugin.consume_records),
        "network_partition": _fixture_helper(plugin.network_partition),
        "config": handles.KafkaTestCluster.config,
        "create_topic": handles.KafkaTestCluster.create_topic,
        "delete_topic": handles.KafkaTestCluster.delete_topic,
        "wait_in_sync": handles.KafkaTestCluster.wait_in_sync,
        "client": handles.ZooKeeperTestEnsemble.client,
        "uri": handles.ObjectStore.uri,
        "create_bucket": handles.ObjectStore.create_bucket,
        "catalog": handles.ObjectStore.catalog,
    }


def _default(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def as_documented(function: Callable[..., Any]) -> str:
    """``function``'s parameters as the doc writes them: ``a, b=1, *, c=None, **d`` (no ``self``)."""
    parts: list[str] = []
    star = False
    for parameter in inspect.signature(function).parameters.values():
        if parameter.name == "self":
            continue
        if parameter.kind is parameter.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        if parameter.kind is parameter.VAR_POSITIONAL:
            parts.append(f"*{parameter.name}")
            star = True
        elif parameter.kind is parameter.VAR_KEYWORD:
            parts.append(f"**{parameter.name}")
        elif parameter.default is parameter.empty:
            parts.append(parameter.name)
        else:
            parts.append(f"{parameter.name}={_default(parameter.default)}")
    return ", ".join(parts)


def fixtures_section(text: str) -> str:
    start = text.index("\n## Fixtures\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_as_documented_writes_kinds_and_defaults_as_the_doc_does() -> None:
    def f(self: object, a: int, b: str = "x", *, c: float = 1.0, **rest: Any) -> None:
        return None

    assert as_documented(f) == 'a, b="x", *, c=1.0, **rest'


def test_every_documented_signature_matches_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    documented = _documented(monkeypatch)
    found: dict[str, list[str]] = {}
    for name, parameters in CALL.findall(fixtures_section(DOC.read_text())):
        if name in documented:
            found.setdefault(name, []).append(parameters)
    assert set(found) == set(documented), f"not documented in docs/testing.md: {sorted(set(documented) - set(found))}"
    mismatches = {
        name: (written, as_documented(documented[name]))
        for name, writings in found.items() for written in writings if written != as_documented(documented[name])
    }
    assert mismatches == {}, "docs/testing.md (written, code): " + repr(mismatches)
