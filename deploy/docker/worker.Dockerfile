# floe-worker: one model behind floe.v1.Worker, with the CUDA kernels.
#   docker build -f deploy/docker/worker.Dockerfile -t floe-worker .
#   docker build -f deploy/docker/worker.Dockerfile --build-arg CUDA_ARCHS=80 ...  (A100)
# CUDA images are Ubuntu 24.04 based, which has the same Abseil/gRPC/protobuf
# versions as Debian 12. The CPU backend is in the same binary.
ARG CUDA_VERSION=12.6.3
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04 AS build
ARG CUDA_ARCHS=90
COPY . /src
RUN sh /src/deploy/docker/build-in-image.sh floe-worker \
      -DFLOE_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS}

FROM nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu24.04
COPY --from=build /out/ /
RUN ldconfig && useradd --system --uid 10001 floe
USER 10001
# Models are mounted (or downloaded by the chart's init container) under /models.
EXPOSE 50061 9102
ENTRYPOINT ["/usr/local/bin/floe-worker"]
CMD ["--help"]
