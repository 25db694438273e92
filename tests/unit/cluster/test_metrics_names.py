"""The metrics table of docs/settings.md names exactly the families `/metrics` exports (counters with `_total`)."""
from __future__ import annotations

import re
from pathlib import Path

from laminar_kafka.cluster.metrics import NodeMetrics

SETTINGS_DOC = Path(__file__).resolve().parents[3] / "docs" / "settings.md"


def exported_names() -> set[str]:
    names = set()
    for family in NodeMetrics(1).registry.collect():
        if family.name.startswith("laminar_"):  # the standard process_* / python_info families are not listed
            names.add(f"{family.name}_total" if family.type == "counter" else family.name)
    return names


def documented_names() -> set[str]:
    text = SETTINGS_DOC.read_text()
    section = text[text.index("## Metrics"):]
    return set(re.findall(r"`(laminar_[a-z_]+)`", section))


def test_the_settings_doc_lists_exactly_the_exported_metric_families() -> None:
    assert documented_names() == exported_names()
