# Apache Iceberg's REST catalog server (org.apache.iceberg.rest.RESTCatalogServer, the server of the
# apache/iceberg-rest-fixture image) with S3FileIO, on port 8181. The jars are the ones
# laminar_kafka.devstack.jvm.rest_catalog resolves from Maven Central (lib/: the server, s3/: iceberg-aws
# and the AWS SDK bundle). Configuration: CATALOG_* variables (CATALOG_URI, CATALOG_WAREHOUSE,
# CATALOG_IO__IMPL, CATALOG_S3_ENDPOINT...: "_" becomes ".", "__" becomes "-"); S3 credentials as
# AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION. Default catalog: a SQLite file in
# /var/lib/iceberg (put a volume there so a restart keeps the tables).
ARG BASE=laminar-java:17
FROM ${BASE}
COPY lib/ /opt/iceberg/lib/
COPY s3/ /opt/iceberg/s3/
RUN useradd --system --home-dir /var/lib/iceberg --create-home iceberg
USER iceberg
# CATALOG_CLIENTS=1: one SQLite connection. With the default pool, a catalog restarted on an existing
# database keeps a read open on one connection (left by its start-up checks), and every commit made
# through another connection fails with SQLITE_BUSY ("database is locked") from then on.
ENV CATALOG_URI=jdbc:sqlite:/var/lib/iceberg/catalog.db CATALOG_CLIENTS=1 CATALOG_REST_PORT=8181 \
    JAVA_OPTS="-Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
EXPOSE 8181
# shell form: JAVA_OPTS is a word list; exec keeps java as pid 1 (SIGTERM reaches it)
ENTRYPOINT exec java $JAVA_OPTS -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true \
    -cp '/opt/iceberg/lib/*:/opt/iceberg/s3/*' org.apache.iceberg.rest.RESTCatalogServer
