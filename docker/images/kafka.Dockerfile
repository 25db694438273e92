# Apache Kafka in KRaft mode (one combined broker+controller by default). Configuration: every
# KAFKA_<NAME> environment variable becomes the server property <name> (lower case, "_" -> ".",
# "__" -> "_", "___" -> "-"), as in the apache/kafka image; CLUSTER_ID names the cluster;
# KAFKA_HEAP_OPTS sets the heap. Data in /var/lib/kafka/data.
ARG BASE=laminar-jvm-servers:latest
FROM ${BASE}
COPY kafka-entrypoint.sh /usr/local/bin/kafka-entrypoint.sh
RUN mkdir -p /var/lib/kafka/data /etc/kafka && chown -R laminar /var/lib/kafka /etc/kafka
USER laminar
EXPOSE 9092 9093
ENTRYPOINT ["/usr/local/bin/kafka-entrypoint.sh"]
