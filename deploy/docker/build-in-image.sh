#!/bin/sh
# Builder stage of the Floe images: installs the build dependencies (Debian 12
# or Ubuntu 24.04, which carry the same Abseil/gRPC/protobuf/Highway versions),
# builds one service binary, and copies it with the shared libraries it loads
# (from ldd) into /out, so the runtime stage needs no package names.
#   build-in-image.sh TARGET [CMAKE ARGS...]
set -eu
target=$1; shift
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config ca-certificates \
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
  libabsl-dev prometheus-cpp-dev libhwy-dev libpcre2-dev nlohmann-json3-dev >/dev/null
cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFLOE_BUILD_TESTS=OFF -DFLOE_BUILD_BENCH=OFF "$@"
ninja -C /build "$target"
mkdir -p /out/usr/local/bin /out/usr/local/lib/floe /out/etc/ld.so.conf.d
cp /build/bin/"$target" /out/usr/local/bin/
# Libraries outside the C/C++ runtime (the runtime image has those), in a folder
# of their own: copying into /lib would clash with merged-/usr symlinks.
ldd /build/bin/"$target" | awk '/=> \// {print $3}' |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so' |
  while read -r lib; do cp -L "$lib" /out/usr/local/lib/floe/; done
echo /usr/local/lib/floe >/out/etc/ld.so.conf.d/floe.conf
