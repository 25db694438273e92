"""The Hive-style Parquet tree: the exactly-once sink, its file names, encoding and epoch records."""
