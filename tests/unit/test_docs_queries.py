"""The DuckDB queries docs/lake.md shows are the ones the integration tests run, and the extension
wheels of the test extra match the installed DuckDB (no servers; loading an extension is local)."""
from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import duckdb
import pytest

from tests import duckdb_queries as q

ROOT = Path(__file__).resolve().parents[2]
EXTENSIONS = sorted({*q.PARQUET_TREE, *q.ON_S3, *q.ICEBERG, *q.ICEBERG_SQLITE_CATALOG})
#: what an extension needs loaded before it (iceberg's initialisation loads avro, or fails without it)
NEEDS = {"iceberg": ("avro",)}


@pytest.mark.parametrize("template", q.TEMPLATES)
def test_each_query_the_tests_run_is_in_the_docs_verbatim(template: str) -> None:
    assert template.format(**q.DOCS_VALUES) in (ROOT / "docs" / "lake.md").read_text()


def sql_statements(text: str) -> list[str]:
    """The statements of the ```sql blocks of ``text`` (``--`` comment lines left out)."""
    statements = []
    for block in re.findall(r"```sql\n(.*?)```", text, re.S):
        lines = [line for line in block.splitlines() if not line.strip().startswith("--")]
        statements += [s.strip().rstrip(";") + ";" for s in "\n".join(lines).split(";\n") if s.strip()]
    return statements


@pytest.mark.parametrize("place", ["docs/lake.md#query-the-lake", "README.md#querying-the-lake"])
def test_the_docs_show_no_query_the_tests_do_not_run(place: str) -> None:
    """Every statement of the DuckDB blocks in docs/lake.md's "Query the lake" and the README's
    "Querying the lake" is a rendered template, one per line."""
    path, heading = place.split("#")
    text = (ROOT / path).read_text()
    title = {"query-the-lake": "## Query the lake", "querying-the-lake": "### Querying the lake"}[heading]
    section = text[text.index(title):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    statements = sql_statements(section)
    assert len(statements) >= 3
    rendered = {template.format(**q.DOCS_VALUES) for template in q.TEMPLATES}
    assert [statement for statement in statements if statement not in rendered] == []


@pytest.mark.parametrize("name", EXTENSIONS)
def test_each_extension_wheel_is_built_for_the_installed_duckdb(name: str, tmp_path: Path) -> None:
    distribution = f"duckdb-extension-{name.replace('_', '-')}"
    assert importlib.metadata.version(distribution) == duckdb.__version__
    assert q.extension_file(name).is_file()
    connection = q.connect(tmp_path, (*NEEDS.get(name, ()), name))
    loaded = connection.execute("SELECT loaded FROM duckdb_extensions() WHERE extension_name = ?", [name]).fetchall()
    assert loaded == [(True,)]
    assert not list(tmp_path.iterdir())  # loaded by path: nothing installed


def test_iceberg_cannot_load_without_avro(tmp_path: Path) -> None:
    with pytest.raises(duckdb.InvalidInputException, match="avro"):
        q.connect(tmp_path, ("iceberg",))


def test_the_installed_duckdb_is_the_pinned_one() -> None:
    pins = re.findall(r'"(duckdb(?:-extension-[a-z-]+)?)==([0-9.]+)"', (ROOT / "pyproject.toml").read_text())
    assert {name for name, _ in pins} == {"duckdb", *(f"duckdb-extension-{n.replace('_', '-')}" for n in EXTENSIONS)}
    assert {version for _, version in pins} == {duckdb.__version__}


def test_the_docs_setup_block_loads_the_extensions_without_downloads() -> None:
    """docs/lake.md's Python block, run as written: the extensions loaded, auto-install off and locked."""
    text = (ROOT / "docs" / "lake.md").read_text()
    section = text[text.index("## Query the lake"):]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None, "docs/lake.md lost its DuckDB setup block"
    namespace: dict[str, object] = {}
    exec(compile(block.group(1), "docs/lake.md", "exec"), namespace)  # our own docs
    con = namespace["con"]
    assert isinstance(con, duckdb.DuckDBPyConnection)
    loaded = con.execute("SELECT extension_name FROM duckdb_extensions() WHERE loaded AND extension_name IN "
                         "('avro', 'httpfs', 'iceberg') ORDER BY 1").fetchall()
    assert loaded == [("avro",), ("httpfs",), ("iceberg",)]
    assert con.execute("SELECT current_setting('autoinstall_known_extensions'), "
                       "current_setting('lock_configuration')").fetchall() == [(False, True)]
