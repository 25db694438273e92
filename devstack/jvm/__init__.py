"""The JVM servers of the dev stack: Kafka and ZooKeeper, a schema registry, an Iceberg REST catalog."""
