# The pinned Kafka and ZooKeeper jars (devstack/pom.xml, resolved from Maven Central by
# laminar_kafka.devstack.jvm.artifacts.ensure_artifacts) on the Java image: the shared layer of the two server images.
ARG BASE=laminar-java:17
FROM ${BASE}
COPY lib/ /opt/laminar/lib/
COPY log4j2.properties /opt/laminar/log4j2.properties
RUN useradd --system --home-dir /var/lib/laminar --create-home laminar
