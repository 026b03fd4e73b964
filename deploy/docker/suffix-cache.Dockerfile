# floe-suffix-cache: the global suffix tree for speculative decoding.
#   docker build -f deploy/docker/suffix-cache.Dockerfile -t floe-suffix-cache .
# Snapshots go to --snapshot-dir (a PVC in the chart); SIGTERM writes a final one.
FROM debian:12 AS build
COPY . /src
RUN sh /src/deploy/docker/build-in-image.sh floe-suffix-cache

FROM debian:12-slim
COPY --from=build /out/ /
RUN ldconfig && useradd --system --uid 10001 floe \
 && mkdir -p /var/lib/floe/suffix-cache && chown floe /var/lib/floe/suffix-cache
USER 10001
VOLUME /var/lib/floe/suffix-cache
EXPOSE 50071 9103
ENTRYPOINT ["/usr/local/bin/floe-suffix-cache"]
CMD ["--help"]
