"""The embedded backend (no ZooKeeper): the local coordinator, its file and memory stores, the state lock."""
