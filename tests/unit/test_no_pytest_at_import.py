"""No shipped module imports pytest when it is imported, but the two that exist for pytest: the
pytest plugin (``laminar_kafka.testing.plugin``) and the conformance kit's test factory
(``laminar_kafka.connector.conformance.pytest_kit``). A node, a library user and the command line
never load the test framework."""
from __future__ import annotations

import json
import subprocess
import sys

FOR_PYTEST = ("laminar_kafka.testing.plugin", "laminar_kafka.connector.conformance.pytest_kit")

_IMPORT_ALL = """
import importlib, json, pkgutil, sys
import laminar_kafka
skip = set(sys.argv[1:])
names = []
for package in ["laminar_kafka"]:
    for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
        if info.name.endswith("__main__") or info.name in skip:
            continue
        names.append(info.name)
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": len(names), "pytest": "pytest" in sys.modules}))
"""


def _import_all(*skip: str) -> dict[str, object]:
    run = subprocess.run([sys.executable, "-c", _IMPORT_ALL, *skip], capture_output=True, text=True, timeout=300,
                         check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    result: dict[str, object] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def test_no_shipped_module_but_the_pytest_ones_imports_pytest() -> None:
    without = _import_all(*FOR_PYTEST)
    assert isinstance(without["modules"], int) and without["modules"] > 150
    assert without["pytest"] is False
    assert _import_all()["pytest"] is True  # the check sees the two that do
