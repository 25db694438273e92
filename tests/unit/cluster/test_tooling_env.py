"""The LAMINAR_* variables that CI and the Makefile export reach every process the tests start, nodes
included: a node must take them as tooling, never as a mistyped setting (LAMINAR_PROMTOOL was refused
as "did you mean LAMINAR_FORMAT?" by every node a CI run started)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from laminar_kafka.cluster.config import ENV_PREFIX, SETTING_NAMES, env_name, settings_from

ROOT = Path(__file__).resolve().parents[3]
BASE = {"bootstrap": "k:9092", "topic": "orders", "output": "/tmp/out"}
#: set by the dev stack only in the environment of the openssl and keytool processes it runs
#: (devstack/security.py): no node ever sees them
SUBPROCESS_ONLY = {"LAMINAR_TLS_KEY_PASSWORD", "LAMINAR_TLS_STORE_PASSWORD"}


def _exported_names() -> list[str]:
    """Every LAMINAR_* name the CI scripts, the Makefile and the tools mention (settings excluded)."""
    settings = {env_name(name) for name in SETTING_NAMES}
    paths = [path for path in sorted((ROOT / ".ci").iterdir()) if path.is_file()] + [ROOT / "Makefile"]
    for package in ("devstack", "laminar_kafka"):  # the tools read these from the environment
        paths += sorted((ROOT / package).rglob("*.py"))
    texts = [path.read_text() for path in paths]
    names = {m for text in texts for m in re.findall(r"\bLAMINAR_[A-Z0-9_]*[A-Z0-9]\b", text)}
    return sorted(name for name in names - SUBPROCESS_ONLY if name not in settings and "__" not in name)


def test_the_scripts_export_some_tooling_variables() -> None:
    assert "LAMINAR_PROMTOOL" in _exported_names()
    assert all(name.startswith(ENV_PREFIX) for name in _exported_names())


@pytest.mark.parametrize("name", _exported_names())
def test_a_node_ignores_a_tooling_variable(name: str) -> None:
    settings_from(BASE, {name: "1"}, {})


def test_a_mistyped_setting_is_still_refused() -> None:
    with pytest.raises(Exception, match="did you mean LAMINAR_FORMAT"):
        settings_from(BASE, {"LAMINAR_FROMAT": "raw"}, {})
