"""Every package is typed (PEP 561 py.typed marker) and reports the installed distribution's version."""
from __future__ import annotations

import importlib
import importlib.metadata
from pathlib import Path

import pytest

PACKAGES = ("kafka_source", "coordinator", "cluster", "devstack")


@pytest.mark.parametrize("name", PACKAGES)
def test_each_package_has_py_typed_and_the_distribution_version(name: str) -> None:
    package = importlib.import_module(name)
    assert (Path(package.__file__).parent / "py.typed").is_file()
    try:
        expected = importlib.metadata.version("laminar-kafka")
    except importlib.metadata.PackageNotFoundError:
        expected = "0+unknown"
    assert package.__version__ == expected
