"""What operators run against a pipeline: status, health, the exactly-once audit, progress bars."""
