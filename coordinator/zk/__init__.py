"""The ZooKeeper backend: the coordinator, its store, sessions and ACLs, and chunked values."""
