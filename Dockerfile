# mrtr-gateway container image: a virtual environment built in one stage, copied
# into a clean runtime stage that runs as uid 65532 and works on a read-only root.
#
#   docker build -t mrtr-gateway .
#   docker run --read-only -p 8080:8080 -v ./gateway.yaml:/etc/mrtr-gateway/config.yaml:ro \
#     -e MRTR_GATEWAY_SEALING_KEYS=... mrtr-gateway
ARG BASE=python:3.13-slim-trixie

FROM ${BASE} AS build
# A CA bundle for pip where a proxy re-signs TLS (unset in a normal build).
ARG PIP_CERT
WORKDIR /src
RUN python3 -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY gateway ./gateway
RUN /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check ".[otel]" \
 && /opt/venv/bin/python -m compileall -q /opt/venv

FROM ${BASE}
LABEL org.opencontainers.image.title="mrtr-gateway" \
      org.opencontainers.image.description="MCP 2026-07-28 clients in front, legacy MCP servers behind" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/venv /opt/venv
COPY config/example.yaml /etc/mrtr-gateway/config.yaml
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MRTR_GATEWAY_LOG_FORMAT=json
USER 65532:65532
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=5s \
  CMD ["/opt/venv/bin/python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
ENTRYPOINT ["/opt/venv/bin/mrtr-gateway"]
CMD ["serve", "--config", "/etc/mrtr-gateway/config.yaml", "--host", "0.0.0.0"]
