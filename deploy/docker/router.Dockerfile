# floe-router: the public floe.v1.Floe gRPC API.
#   docker build -f deploy/docker/router.Dockerfile -t floe-router .
# Flags and probes: deploy/README.md (the Helm chart passes every flag).
FROM debian:12 AS build
COPY . /src
RUN sh /src/deploy/docker/build-in-image.sh floe-router

FROM debian:12-slim
COPY --from=build /out/ /
RUN ldconfig && useradd --system --uid 10001 floe
USER 10001
# gRPC (--port) and Prometheus /metrics (--metrics-port), as in the chart's values.
EXPOSE 50051 9101
ENTRYPOINT ["/usr/local/bin/floe-router"]
CMD ["--help"]
