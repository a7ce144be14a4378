#!/usr/bin/env bash
# Installs every build and test dependency from Debian 12 packages (idempotent).
# What the benchmarks compare against (PyTorch, OpenBLAS) is part of every set-up; `--bench` is
# still accepted and adds nothing.
set -euo pipefail

packages=(cmake g++ make ninja-build pkg-config
          libcaf-dev libeigen3-dev capnproto libcapnp-dev libssl-dev openssl
          libspdlog-dev libboost-dev libboost-test-dev libtomlplusplus-dev libcli11-dev prometheus-cpp-dev
          nlohmann-json3-dev libcurl4-openssl-dev etcd-server iproute2 python3 libsentencepiece-dev sentencepiece
          libtorch-dev python3-torch  # TorchScript chips (diloco::torch) and the modules its tests export
          libopenblas-dev libopenblas0-pthread gnuplot-nox chromium)
# libboost-dev: Boost.Beast/Asio serve --http. libopenblas-dev does the built-in models' matrix
# products (CMake requires it); libopenblas0-pthread becomes the system BLAS that libtorch (and
# PyTorch in the benchmarks) computes with, so every build and test runs the torch parts the way
# the benchmarks measure them. gnuplot-nox draws `diloco plot`; chromium renders the status page
# in its test. etcd-server elects the leader of syncer replicas ([[syncers]]; the tests start
# their own on loopback), reached through its HTTP/JSON gateway with libcurl.

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
