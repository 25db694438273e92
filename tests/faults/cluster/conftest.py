"""The cluster harness's fixtures for every test in this folder (tests/integration/cluster/harness.py)."""
from tests.integration.cluster.harness import embedded, iceberg_pipeline, pipeline

__all__ = ["embedded", "iceberg_pipeline", "pipeline"]
