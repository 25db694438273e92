"""No underscore name crosses a module boundary in the distribution's code.

A name that starts with one underscore is private to the module that defines it. A module that
needs another's helper imports a public name (the helper, given a docstring, is part of what its
module offers) or the helper moves. Found by reading the source (no import): every
``from M import _x``, every import of a private module (``M._m``), and every ``m._x`` where ``m``
is one of our modules imported by name.

Third-party private names are a separate matter: the few the code needs are listed in
:data:`THIRD_PARTY`, each with the reason its import line's comment gives, and no other is allowed.
"""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NS = "laminar_kafka"
#: repository folders mapped into NS (pyproject.toml's package-dir); laminar_kafka/ links to them
MAPPED = ("coordinator", "connector", "kafka_source", "redis_source", "cluster", "devstack")

#: (file, imported private name) of third-party libraries, each commented where it is imported
THIRD_PARTY = {
    ("cluster/lake/iceberg/partitions.py", "pyiceberg.io.pyarrow._check_pyarrow_schema_compatible"),
    ("cluster/lake/iceberg/tables.py", "pyiceberg.io.pyarrow._pyarrow_to_schema_without_ids"),
    ("cluster/lake/iceberg/upsert_commit.py", "pyiceberg.io.pyarrow._dataframe_to_data_files"),
    ("kafka_source/schema_registry/client.py", "confluent_kafka.schema_registry._sync.avro._resolve_named_schema"),
    ("kafka_source/schema_registry/client.py", "confluent_kafka.schema_registry.common.protobuf._init_pool"),
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _shipped_files() -> Iterator[Path]:
    """The distribution's modules, each once (laminar_kafka/'s links to the mapped folders skipped)."""
    for folder in MAPPED:
        yield from sorted((ROOT / folder).rglob("*.py"))
    for path in sorted((ROOT / NS).rglob("*.py")):
        if path.relative_to(ROOT / NS).parts[0] not in MAPPED:
            yield path


def _dotted(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] != NS:
        parts.insert(0, NS)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_our_module(dotted: str) -> bool:
    if not dotted.startswith(f"{NS}."):
        return False
    relative = Path(*dotted.split(".")[1:])
    for base in (ROOT, ROOT / NS):
        if (base / relative).with_suffix(".py").is_file() or (base / relative / "__init__.py").is_file():
            return True
    return False


def private_imports(path: Path, text: str | None = None) -> list[tuple[int, str]]:
    """``(line, dotted name)`` of every private name the module at ``path`` (its source ``text``,
    read from ``path`` by default) imports or reaches through a module of ours it imported."""
    tree = ast.parse(path.read_text() if text is None else text, str(path))
    package = _dotted(path) if path.name == "__init__.py" else _dotted(path).rpartition(".")[0]
    found: list[tuple[int, str]] = []
    modules: dict[str, str] = {}  # local name -> our module it names
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, source] if source else base)
            for alias in node.names:
                full = f"{source}.{alias.name}"
                if any(_private(part) for part in full.split(".")):
                    found.append((node.lineno, full))
                if _is_our_module(full):
                    modules[alias.asname or alias.name] = full
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if any(_private(part) for part in alias.name.split(".")):
                    found.append((node.lineno, alias.name))
                if alias.asname and _is_our_module(alias.name):
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and _private(node.attr)):
            found.append((node.lineno, f"{modules[node.value.id]}.{node.attr}"))
    return sorted(set(found))


def test_the_scan_finds_each_kind_of_private_import() -> None:
    text = (
        "from laminar_kafka.coordinator.codec import _hidden, visible\n"
        "from . import errors\n"
        "import laminar_kafka.coordinator.layout as layout\n"
        "from pyiceberg.io import _thing\n"
        "errors._secret()\n"
        "layout._path\n"
        "errors.__name__\n"
        "from laminar_kafka.cluster._inner import name\n"
    )
    assert private_imports(ROOT / "coordinator" / "probe.py", text) == [
        (1, "laminar_kafka.coordinator.codec._hidden"),
        (4, "pyiceberg.io._thing"),
        (5, "laminar_kafka.coordinator.errors._secret"),
        (6, "laminar_kafka.coordinator.layout._path"),
        (8, "laminar_kafka.cluster._inner.name"),
    ]


def test_no_private_name_of_ours_is_imported_across_modules() -> None:
    crossings = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in _shipped_files()
        for line, name in private_imports(path)
        if (str(path.relative_to(ROOT)), name) not in THIRD_PARTY
    ]
    assert crossings == []


def test_each_third_party_private_import_is_still_there_and_says_why() -> None:
    for relative, name in sorted(THIRD_PARTY):
        path = ROOT / relative
        lines = path.read_text().splitlines()
        found = [line for line, imported in private_imports(path) if imported == name]
        assert found, f"{relative} no longer imports {name}: drop it from THIRD_PARTY"
        above = lines[max(0, found[0] - 4):found[0] + 1]
        assert any("#" in text and "private" in text for text in above), (
            f"{relative}:{found[0]}: say in a comment why the private {name} is imported"
        )
