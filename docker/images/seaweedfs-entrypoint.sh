#!/bin/bash
# Writes the S3 identities file (one admin identity: SEAWEEDFS_ACCESS_KEY / SEAWEEDFS_SECRET_KEY,
# required) and execs `weed mini` on /data with its S3 endpoint on 0.0.0.0:8333. Off: SeaweedFS's
# own Iceberg catalog and Lance server (the lake uses Iceberg's REST catalog), WebDAV, the admin
# pages, telemetry and creating buckets on write (a bucket is created on purpose, by the init).
# Extra `weed mini` flags: the container's arguments.
set -euo pipefail
: "${SEAWEEDFS_ACCESS_KEY:?set SEAWEEDFS_ACCESS_KEY (the S3 access key id)}"
: "${SEAWEEDFS_SECRET_KEY:?set SEAWEEDFS_SECRET_KEY (the S3 secret access key)}"
CONFIG=/var/lib/seaweedfs/s3-identities.json
umask 077
printf '{"identities": [{"name": "admin", "credentials": [{"accessKey": "%s", "secretKey": "%s"}], "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}\n' \
  "$SEAWEEDFS_ACCESS_KEY" "$SEAWEEDFS_SECRET_KEY" > "$CONFIG"
unset SEAWEEDFS_ACCESS_KEY SEAWEEDFS_SECRET_KEY
mkdir -p /data/logs
# -ip: how weed's own services address each other (all in this process); -ip.bind: every listener
exec /usr/local/bin/weed -logdir=/data/logs -config_dir=/var/lib/seaweedfs mini -dir=/data \
  -ip=127.0.0.1 -ip.bind=0.0.0.0 -s3.port=8333 -s3.port.iceberg=0 -s3.port.lance=0 -webdav=false \
  -admin.ui=false -master.telemetry=false -s3.autoCreateBucket=false -s3.config="$CONFIG" \
  -filer.localSocket=/var/lib/seaweedfs/filer.sock -s3.localSocket=/var/lib/seaweedfs/s3.sock "$@"
