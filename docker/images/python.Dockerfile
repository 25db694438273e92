# A python:3.11-slim stand-in built from Debian's packages (bookworm's Python is 3.11), for machines
# where no registry serves python:3.11-slim. ca-certificates.crt is the building host's CA bundle, so
# that pip reaches PyPI through whatever TLS setup the host has.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-pip python3-venv ca-certificates passwd \
 && rm -rf /var/lib/apt/lists/* \
 && rm -f /usr/lib/python3.*/EXTERNALLY-MANAGED \
 && ln -sf /usr/bin/python3 /usr/local/bin/python && ln -sf /usr/bin/pip3 /usr/local/bin/pip
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_DEFAULT_TIMEOUT=180 PYTHONDONTWRITEBYTECODE=1
CMD ["python3"]
