"""Apache Iceberg tables: one commit per epoch and table, maintenance, and the epoch records."""
