#!/usr/bin/env bash
# Installs every build and test dependency from Debian 12 packages (idempotent).
# `scripts/setup.sh --bench` also installs what the benchmarks compare against (PyTorch, OpenBLAS).
set -euo pipefail

packages=(cmake g++ make ninja-build pkg-config
          libcaf-dev libeigen3-dev capnproto libcapnp-dev libssl-dev openssl
          libspdlog-dev libboost-test-dev libtomlplusplus-dev libcli11-dev prometheus-cpp-dev
          nlohmann-json3-dev iproute2 python3 libsentencepiece-dev sentencepiece
          libtorch-dev python3-torch  # TorchScript chips (diloco::torch) and the modules its tests export
          libcivetweb-dev gnuplot-nox chromium libopenblas-dev)
# libcivetweb-dev serves --http; gnuplot-nox draws `diloco plot`; chromium renders the status page
# in its test; libopenblas-dev does the built-in models' matrix products (CMake requires it).
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(libopenblas0-pthread)
fi

# `--fuzz`: clang and its libFuzzer/sanitizer runtimes (tests/fuzz/README.md).
if [[ " $* " == *" --fuzz "* ]]; then
  packages+=(clang libclang-rt-14-dev)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
