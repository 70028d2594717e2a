#!/usr/bin/env bash
# Installs the Debian packages headroom needs to build, test and benchmark, then the npm packages
# of web/ (the agent dashboard's uPlot, and playwright-core that drives Chromium in its test) with
# `npm ci` from web/package-lock.json, and of bench/duckdb/ (DuckDB, a peer of `make
# bench-pandas`) from its lock.
# Idempotent: installs only what is missing. Runs apt-get as root, or through sudo.
# python3-torch is in the default list (the GRPO example, the Python client's multi-rank test,
# the PyTorch peers of `make bench-ppo` and `make bench-diloco`); `setup.sh --torch`, which used
# to add it, is still accepted and does nothing more.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  ccache mold                        # the compiler cache of every preset, and the dev loop's linker
  clang libclang-rt-14-dev           # libFuzzer and sanitizer runtimes for clang
  nlohmann-json3-dev libcli11-dev libfmt-dev libtomlplusplus-dev
  libfftw3-dev libfast-float-dev libeigen3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libboost-dev                       # the agent's HTTP server: Boost.Asio + Beast (header-only)
  libcpp-httplib-dev                 # an HTTP client for the agent's tests
  etcd-server etcd-client            # the site coordinator's store; tests start their own
  libgrpc++-dev libprotobuf-dev      # etcd's gRPC: a store's lease renewals on one stream
  protobuf-compiler protobuf-compiler-grpc  # etcd_lease.proto to C++ (protoc, grpc_cpp_plugin)
  slurm-wlm munge                    # opportunistic workers as Slurm jobs (tests start their own)
  libtorch-dev libopenblas0-pthread  # headroom diloco's model (OpenBLAS: the reference BLAS is ~10x slower)
  libgloo-dev libssl-dev             # its collectives (TCP) and SHA-256 / HMAC (libcrypto)
  bible-kjv bible-kjv-text fortunes fortunes-min jargon-text  # its corpus (scripts/build_corpus.py)
  python3 python3-pandas python3-numpy  # independent reference computations and the pandas peer
  chromium                           # the dashboard test (headless)
  wrk                                # the agent's API load benchmark
  prometheus                         # power from Prometheus (tests start their own) and promtool
  python3-yaml                       # the alert rules' checks (tests/deploy/check_monitoring.py)
  python3-venv python3-pip python3-setuptools python3-wheel  # the client package's install test
  python3-torch                      # the GRPO example and the Python client's multi-rank test
  lintian systemd                    # the package's test: lintian, and systemd-analyze on its units
  help2man                           # the package's manual pages, from --help
  curl                               # the README's runnable examples (tests/docs/readme_commands_test.py)
)
# Node.js and npm: the machine's own where it has them, else Debian's.
if ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi
# `--torch` (make bench-ppo, make bench-diloco) adds nothing: python3-torch is in the list above.

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  run_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
  }
  export DEBIAN_FRONTEND=noninteractive
  run_root apt-get update -qq
  run_root apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# web/node_modules, exactly as web/package-lock.json pins it; again only when the lock changed.
web="$(cd "$(dirname "$0")/../web" && pwd)"
if [ ! -f "$web/node_modules/.package-lock.json" ] ||
   [ "$web/package-lock.json" -nt "$web/node_modules/.package-lock.json" ]; then
  echo "setup: npm ci in web/"
  npm ci --prefix "$web" --no-audit --no-fund --loglevel=error
fi

# bench/duckdb/node_modules (DuckDB, the second peer of `make bench-pandas`), as its lock pins it.
duck="$(cd "$(dirname "$0")/../bench/duckdb" && pwd)"
if [ ! -f "$duck/node_modules/.package-lock.json" ] ||
   [ "$duck/package-lock.json" -nt "$duck/node_modules/.package-lock.json" ]; then
  echo "setup: npm ci in bench/duckdb/"
  npm ci --prefix "$duck" --no-audit --no-fund --loglevel=error
fi

# headroom diloco's corpus (build/corpus: train.txt, val.txt), from the packages above; once.
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -f "$root/build/corpus/manifest.json" ] ||
   [ "$root/scripts/build_corpus.py" -nt "$root/build/corpus/manifest.json" ]; then
  /usr/bin/python3 "$root/scripts/build_corpus.py" "$root/build/corpus"
fi
