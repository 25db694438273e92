"""The lake a pipeline publishes into, and the record it keeps there: settings, pins, reconciliation."""
