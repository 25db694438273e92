"""The change-file sweep of `compact` (keyed Iceberg tables) on an object store: the listing and the
deletes through pyarrow's S3 filesystem (moto's S3) find the committed epochs' change files and
leave a later epoch's, the table's ``data/`` and ``metadata/``, and a topic directory that is absent."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from laminar_kafka.cluster.lake.iceberg.upsert_commit import sweep_change_files
from laminar_kafka.cluster.lake.parquet.sink import open_output
from laminar_kafka.devstack.objectstore.moto import MotoServer
from tests.s3_fixtures import TEST_BUCKET


def test_the_sweep_lists_and_deletes_through_s3(moto_s3_server: MotoServer) -> None:
    fs, root = open_output(f"s3://{TEST_BUCKET}/sweep")
    names = ["orders/dt=2026-12-06/epoch-0000000001.node-1.boot-b.seq-00000001.parquet",
             "orders/epoch-0000000002.node-2.boot-b.seq-00000002.parquet",
             "orders/epoch-0000000003.node-1.boot-b.seq-00000003.parquet",
             "orders/data/epoch-0000000001.node-1.boot-b.seq-00000009.parquet",
             "orders/metadata/v1.metadata.json"]
    for name in names:
        with fs.open_output_stream(f"{root}/{name}") as out:
            pq.write_table(pa.table({"id": [1]}), out)
    assert sweep_change_files(fs, root, "orders", 2) == 2
    left = sorted(info.path.removeprefix(f"{root}/")
                  for info in fs.get_file_info(pafs.FileSelector(f"{root}/orders", recursive=True))
                  if info.type == pafs.FileType.File)
    assert left == sorted(names[2:])
    assert sweep_change_files(fs, root, "orders", 2) == 0  # nothing left to sweep
    assert sweep_change_files(fs, root, "absent", 2) == 0
