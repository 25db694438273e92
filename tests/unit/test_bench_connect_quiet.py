"""`bench/bench_connect.py` prints JSON and no pyiceberg notice: reading back a table whose data files
store ``_topic`` as an Arrow dictionary (as the node's do) made pyiceberg log "Iceberg does not have a
dictionary type" twice per file (78 lines in one run). Each reading runs in a fresh interpreter, so the
filter one of them installs cannot hide the notice from the other (an embedded SQLite catalog, no servers)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOTICE = "Iceberg does not have a dictionary type"

#: a table with one data file whose stored Arrow schema has ``_topic`` as dictionary<string>
BUILD = textwrap.dedent("""
    import sys
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.catalog.sql import SqlCatalog

    where = sys.argv[1]
    catalog = SqlCatalog("bench", uri=f"sqlite:///{where}/catalog.db", warehouse=f"file://{where}")
    catalog.create_namespace("n")
    rows = pa.table({"_topic": pa.array(["t"] * 4).dictionary_encode(), "_partition": pa.array([0] * 4, pa.int32()),
                     "_offset": pa.array(range(4), pa.int64())})
    pq.write_table(rows, f"{where}/data.parquet")
    plain = pa.schema([("_topic", pa.string()), ("_partition", pa.int32()), ("_offset", pa.int64())])
    catalog.create_table(("n", "t"), plain).add_files([f"{where}/data.parquet"])
""")

#: the bench's own reading of the table (``TableWatch.coordinates``), then pyiceberg's alone
READ = textwrap.dedent("""
    import sys
    from pyiceberg.catalog.sql import SqlCatalog

    where, how = sys.argv[1], sys.argv[2]
    catalog = SqlCatalog("bench", uri=f"sqlite:///{where}/catalog.db", warehouse=f"file://{where}")
    if how == "bench":
        sys.path.insert(0, "bench")
        from bench_connect import TableWatch
        print(TableWatch(catalog, ("n", "t")).coordinates())
    else:
        rows = catalog.load_table(("n", "t")).scan(selected_fields=("_partition", "_offset")).to_arrow()
        print(list(zip(rows["_partition"].to_pylist(), rows["_offset"].to_pylist())))
""")


def python(script: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=120, cwd=REPO)


def test_the_bench_reads_the_nodes_kind_of_table_without_the_dictionary_notice(tmp_path: Path) -> None:
    built = python(BUILD, str(tmp_path))
    assert built.returncode == 0, built.stderr
    plain = python(READ, str(tmp_path), "pyiceberg")
    assert plain.returncode == 0 and NOTICE in plain.stderr, plain.stderr  # the notice the bench printed
    bench = python(READ, str(tmp_path), "bench")
    assert bench.returncode == 0, bench.stderr
    assert bench.stdout.strip() == "[(0, 0), (0, 1), (0, 2), (0, 3)]"
    assert NOTICE not in bench.stderr and bench.stderr == "", bench.stderr
