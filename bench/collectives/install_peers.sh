#!/usr/bin/env bash
# Installs the peers that bench/collectives/run_netns.sh measures phalanx
# against (../shared/bench/peers/README.md): OpenMPI with mpi4py and the Gloo
# C++ library, from Debian's archive. torch gloo and Dask (PEERS="torch-gloo
# dask") need python3-torch python3-distributed python3-dask as well, which
# this adds with --all. Root needed.
set -euo pipefail
PKGS=(openmpi-bin libopenmpi-dev python3-mpi4py libgloo-dev python3-numpy g++ iproute2)
[ "${1:-}" = --all ] && PKGS+=(python3-torch python3-distributed python3-dask)
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${PKGS[@]}"
