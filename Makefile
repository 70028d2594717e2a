# headroom: the two commands of the README, and their parts.
#
#   make demo   install what is missing, build, run the main job on a built-in default
#   make test   install what is missing, build, run every test (every tier in release; unit and
#               integration under ASan+UBSan; the tsan label under TSan; every source of src/
#               compiled alone, with clang's thread-safety analysis; the fuzzers)
#   make check  the two-minute loop: the dev build of the unit tests, and the unit tier
#   make stress the integration and e2e tiers N times beside a CPU burner (flakes)
#
# Everything is installed by scripts/setup.sh (Debian packages via apt-get).

JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 15
# libFuzzer's seed: fixed, so that `make test` explores the same inputs on every run (0: random,
# for a longer hunt: make fuzz FUZZ_SEED=0 FUZZ_SECONDS=600).
FUZZ_SEED ?= 1
DEMO_DIR ?= build/demo
HEADROOM := build/bin/headroom

CHAOS_FAULTS ?= 1000
# The site with a domain layer (tests/site/chaos_domains.py) after it, in `make chaos`.
CHAOS_DOMAIN_FAULTS ?= 200
CHAOS_SEED ?= 1

.PHONY: bench-history rehearsal screenshots package fixed-group-results check stress test-chaos bench-diloco diloco-results diloco-results-warm diloco-wan calibration-results hybrid-results universal-results sites-results frontier-results fleet-results chaos bench-build bench-fleet all setup build test test-release test-asan test-tsan test-thread-safety fuzz bench bench-pandas bench-twin bench-ppo bench-agent bench-hostile bench-hostile-coordinator demo policies results clean format

all: build

setup:
	@./scripts/setup.sh

build: setup
	cmake --preset release
	cmake --build --preset release -j $(JOBS)

test: build
	./scripts/test.sh

# The developer loop (README, "Tests"): the dev preset (-O1, one file at a time, mold, no
# libtorch or Gloo) builds the binaries with unit tests, then the unit tier runs, and the check
# that every test has one tier. Configured once; ninja reconfigures when CMake files change.
check: setup
	@test -f build-dev/build.ninja || cmake --preset dev
	cmake --build --preset dev -j $(JOBS) --target headroom_unit_tests
	ctest --preset unit
	ctest --test-dir build-dev -R '^tiers_are_labelled$$' --output-on-failure

# Flakes: the integration and e2e tiers of the release build STRESS_RUNS times, beside a CPU
# burner on every core; lists every test that failed once (scripts/stress.sh).
STRESS_RUNS ?= 5
stress: build
	./scripts/stress.sh build $(STRESS_RUNS)

# The dashboard test skips where Chromium is missing, except here: setup installs it.
export HEADROOM_REQUIRE_BROWSER := 1

# The .deb: build/headroom_<version>_amd64.deb (CPack, cmake/Install.cmake; docs/INSTALL.md).
# Install it with `sudo apt install ./build/headroom_*.deb`.
package: build
	cmake --build --preset release --target package

# The pictures in docs/images/: the agent's dashboard (a 4-GPU twin job under PID, a minute of
# decisions) and the coordinator's site page (two jobs in a site), taken by their Chromium tests.
screenshots: build
	cd build && DASHBOARD_MIN_SAMPLES=120 HEADROOM_REQUIRE_BROWSER=1 \
	  ctest -R '^(agent_dashboard_chromium|site_page_chromium)$$' --output-on-failure
	cp build/test-artifacts/dashboard.png build/test-artifacts/site-page.png docs/images/
	@echo "screenshots: docs/images/dashboard.png docs/images/site-page.png"

# Every tier of the release build but the chaos test, which scripts/test.sh runs beside the
# other stages (make test-chaos runs it alone).
test-release:
	ctest --preset release -E '^fleet_chaos$$'

test-chaos:
	ctest --preset release -R '^fleet_chaos$$'

# The unit and integration tiers again under AddressSanitizer + UBSan (the e2e tier runs once,
# in release: its Python, browser and promtool drivers are not what the sanitizers check).
test-asan: setup
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS)
	ctest --preset asan

# The threaded code under ThreadSanitizer: the tests labelled tsan (the HTTP transport and its
# workers, the agent's runner, server and guard, the coordinator's server, the site member's
# threads, the communicators, DiLoCo's workers in one process, the simulated clock), and the
# binaries that hold them.
test-tsan: setup
	cmake --preset tsan
	cmake --build --preset tsan -j $(JOBS) --target headroom_tsan_tests
	ctest --preset tsan

# Every source of src/ compiled on its own (no unity batches: a .cc that misses an include it
# needs fails here, not in the next developer's `make check`), by clang with its thread-safety
# analysis on the shared state (common/thread_annotations.h; -Wthread-safety -Werror: a lock
# missing around annotated state fails it). -O0, no debug information: the cheapest compile.
# Every library and `headroom` (the preset builds no tests, benchmarks, libtorch or Gloo code:
# clang cannot build libtorch's headers with libstdc++ 12; those libraries build their sources
# one at a time in every build instead, src/lm/CMakeLists.txt).
test-thread-safety: setup
	cmake --preset thread-safety
	cmake --build --preset thread-safety -j $(JOBS)

# libFuzzer on the trace readers (with the analyzer behind them), on scenario files (with the
# twin behind them), on policy files (with decisions behind them) and on both daemons' HTTP
# requests (Beast's parser and src/net's framing, then the agent's or the coordinator's
# routes), and on DiLoCo's frames (authentication, decoding,
# the screen), for a bounded time each, as many at a time as there are cores (scripts/fuzz.sh).
# The build is clang's
# thread-safety analysis too (headroom_agent, headroom_coord).
fuzz: setup
	cmake --preset fuzz
	cmake --build --preset fuzz -j $(JOBS) --target trace_reader_fuzz scenario_fuzz policy_fuzz http_fuzz \
	  contribution_fuzz etcd_wire_fuzz headroom_agent headroom_coord
	./scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_SEED)

# The rehearsal (issue 52; scripts/rehearsal.py, about 75 minutes): the example trainer at a 7B
# job's time scale (phases of minutes, long-tailed lengths, 2 ranks) beside a twin agent in a real
# etcd site, with a 40-minute site hold in the middle; its report in build/rehearsal/.
REHEARSAL_HOLD_S ?= 2400
rehearsal: build
	/usr/bin/python3 scripts/rehearsal.py $(HEADROOM) . --hold-s $(REHEARSAL_HOLD_S) \
	  --out build/rehearsal
	@echo "rehearsal: build/rehearsal/report.json (the logs beside it)"

# The site against 1,000 faults (tests/site/chaos.py; about an hour), then a site with a domain
# layer against 200 (tests/site/chaos_domains.py; about 20 minutes), their tables written into
# docs/SITE.md between the chaos and chaos-domains markers.
chaos: build
	./scripts/chaos_table.sh build/bin/headroom $(CHAOS_FAULTS) $(CHAOS_SEED) "" $(CHAOS_DOMAIN_FAULTS)

# The benchmarks are not in `make build` (nor `make test`): built here.
bench-build: build
	cmake --build --preset release -j $(JOBS) --target headroom_bench headroom_fleet_scale

bench: bench-build
	build/bin/headroom_bench

# headroom against pandas on a 20-million-sample trace (docs/PERFORMANCE.md).
bench-pandas: build
	./bench/pandas_compare.sh

# Twin ticks per second against the same loop in Python + numpy (docs/PERFORMANCE.md).
bench-twin: bench-build
	./bench/twin_speed_compare.sh

# PPO updates per second against the same update in PyTorch (docs/PERFORMANCE.md).
bench-ppo: bench-build
	./scripts/setup.sh --torch
	./bench/ppo_compare.sh

# DiLoCo's inner step (libtorch from C++) against the same step in PyTorch, and the per-round
# hot paths (docs/PERFORMANCE.md).
bench-diloco: build
	./scripts/setup.sh --torch
	cmake --build --preset release -j $(JOBS) --target headroom_diloco_bench
	./bench/diloco_compare.sh

# The agent's CPU, memory, decision and API latency against a Python stdlib poll-and-serve loop
# doing the same job (docs/PERFORMANCE.md). About 3 minutes.
bench-agent: build
	mkdir -p build/bench
	/usr/bin/python3 bench/agent_overhead.py $(HEADROOM) build/tests/libfake_nvml.so \
	  --json build/bench/agent_overhead.json

# A new client's latency under 64 slow-trickle + 300 idle connections: this agent against the
# cpp-httplib server it replaced (commit 4f35f76, built once into build/baseline-httplib) and
# a Python stdlib server (docs/PERFORMANCE.md). About 2 minutes, plus the baseline's build.
BASELINE_COMMIT := 4f35f76
bench-hostile: build
	@if [ ! -x build/baseline-httplib/build/bin/headroom ]; then \
	  rm -rf build/baseline-httplib; \
	  git worktree add --detach build/baseline-httplib $(BASELINE_COMMIT) && \
	  ln -s $(CURDIR)/web/node_modules build/baseline-httplib/web/node_modules && \
	  cmake -S build/baseline-httplib -B build/baseline-httplib/build -G Ninja \
	    -DCMAKE_BUILD_TYPE=Release -DHEADROOM_BUILD_TESTS=OFF -DHEADROOM_BUILD_BENCH=OFF && \
	  cmake --build build/baseline-httplib/build -j $(JOBS) --target headroom; \
	fi
	/usr/bin/python3 bench/agent_hostile.py $(HEADROOM) build/baseline-httplib/build/bin/headroom \
	  build/tests/libfake_nvml.so --json build/bench/agent_hostile.json

# The same for the coordinator's GET /v1/status: this coordinator (src/net) against the
# cpp-httplib server it replaced (commit df4cb03, built once into
# build/baseline-coordinator-httplib), each leading a site on an etcd the script starts
# (docs/PERFORMANCE.md). About 1 minute, plus the baseline's build.
COORDINATOR_BASELINE_COMMIT := df4cb03
bench-hostile-coordinator: build
	@if [ ! -x build/baseline-coordinator-httplib/build/bin/headroom ]; then \
	  rm -rf build/baseline-coordinator-httplib; \
	  git worktree add --detach build/baseline-coordinator-httplib $(COORDINATOR_BASELINE_COMMIT) && \
	  ln -s $(CURDIR)/web/node_modules build/baseline-coordinator-httplib/web/node_modules && \
	  cmake -S build/baseline-coordinator-httplib -B build/baseline-coordinator-httplib/build -G Ninja \
	    -DCMAKE_BUILD_TYPE=Release -DHEADROOM_BUILD_TESTS=OFF -DHEADROOM_BUILD_BENCH=OFF \
	    -DHEADROOM_WITH_DILOCO=OFF && \
	  cmake --build build/baseline-coordinator-httplib/build -j $(JOBS) --target headroom; \
	fi
	/usr/bin/python3 bench/coordinator_hostile.py $(HEADROOM) \
	  build/baseline-coordinator-httplib/build/bin/headroom --json build/bench/coordinator_hostile.json
	$(MAKE) --no-print-directory bench-history

# GET /v1/status and POST /v1/site-budget while 32 readers pull a one-hour, 1,000-job history
# (issue 53): this coordinator against itself as of HISTORY_BASELINE_COMMIT (the history built
# on the event loop; the same bench program built into build/baseline-history). About 4 minutes,
# plus the baseline's build.
HISTORY_BASELINE_COMMIT := 7b4e8fd
bench-history: build
	cmake --build --preset release -j $(JOBS) --target headroom_history_bench
	@if [ ! -x build/baseline-history/build/bin/headroom_history_bench ]; then \
	  rm -rf build/baseline-history; git worktree prune; \
	  git worktree add --detach build/baseline-history $(HISTORY_BASELINE_COMMIT) && \
	  ln -s $(CURDIR)/web/node_modules build/baseline-history/web/node_modules && \
	  cp bench/coordinator_history.cc bench/history_bench.cmake build/baseline-history/bench/ && \
	  echo 'include(history_bench.cmake)' >> build/baseline-history/bench/CMakeLists.txt && \
	  echo 'target_compile_definitions(headroom_history_bench PRIVATE HEADROOM_HISTORY_BASELINE)' \
	    >> build/baseline-history/bench/CMakeLists.txt && \
	  cmake -S build/baseline-history -B build/baseline-history/build -G Ninja \
	    -DCMAKE_BUILD_TYPE=Release -DHEADROOM_BUILD_TESTS=OFF -DHEADROOM_WITH_DILOCO=OFF && \
	  cmake --build build/baseline-history/build -j $(JOBS) --target headroom_history_bench; \
	fi
	mkdir -p build/bench
	build/bin/headroom_history_bench --json build/bench/coordinator_history.json
	build/baseline-history/build/bin/headroom_history_bench \
	  --json build/bench/coordinator_history_baseline.json || true

# One `headroom coordinator` with 1,000 simulated agents on one etcd of its own: whether it
# holds its 1 s period, grant round trip, etcd's requests and transactions per second, the
# coordinator's CPU and memory (docs/PERFORMANCE.md, "A site at scale"). About 80 s. Then, side
# by side on the same machine, the same agents in two levels: FLEET_DOMAINS domains, each a
# coordinator on an etcd of its own, under one site coordinator on a parent etcd
# (docs/PERFORMANCE.md, "Two levels: domains under a site"; about 100 s more; 0: one level only).
FLEET_AGENTS ?= 1000
FLEET_DOMAINS ?= 4
bench-fleet: bench-build
	mkdir -p build/bench
	build/bin/headroom_fleet_scale --headroom $(HEADROOM) --agents $(FLEET_AGENTS) \
	  --json build/bench/fleet_scale.json
	if [ "$(FLEET_DOMAINS)" -gt 0 ]; then \
	  build/bin/headroom_fleet_scale --headroom $(HEADROOM) --agents $(FLEET_AGENTS) \
	    --domains $(FLEET_DOMAINS) --json build/bench/fleet_scale_domains.json; \
	fi

# Retrain the shipped policies (policies/*.json) and rerun docs/RESULTS.md's evaluations.
policies: build
	./scripts/train_policies.sh $(HEADROOM)

# Issue 34: policies trained with the group size fixed at each scenario's
# (policies/*-fixed-group.json) against the shipped ones, table in docs/RESULTS.md (~20 min).
fixed-group-results: build
	./scripts/fixed_group_results.sh $(HEADROOM)

results: build
	./scripts/control_results.sh $(HEADROOM) build/results

# docs/RESULTS.md's fleet table: fleet-sim on the paper's composite, 10 seeds per row, a site
# budget at 50 % of nameplate, demand response, reservations before the update and the frontier
# (about 10 minutes).
fleet-results: build
	/usr/bin/python3 scripts/fleet_results.py $(HEADROOM) build/fleet-results

demo: build
	./scripts/demo.sh $(HEADROOM) $(DEMO_DIR)

# docs/DILOCO.md's table: 4 DiLoCo workers over H against the data-parallel baseline on the
# same tokens (tiny model, H = 10 to 400; about 30 minutes here).
diloco-results: build
	/usr/bin/python3 scripts/diloco_results.py $(HEADROOM) build/diloco-results

# The same from one pretrained start, as the DiLoCo paper compares, with fp32 pseudo-gradients
# at H = 100, the reduce-scatter mean at H = 400 and streaming at H = 100 (about an hour here).
diloco-results-warm: build
	/usr/bin/python3 scripts/diloco_results.py $(HEADROOM) build/diloco-warm --pretrain-steps 1600 \
	  --h 100,200,400 --fp32-h 100 --mean-h 400 --stream-h 100

# docs/DILOCO.md, "Over a constrained link": DDP and DiLoCo (H = 100) with 4 workers, each in
# its own network namespace behind a 100 Mbit/s token bucket (tc tbf), same seed and steps;
# utilisation measured against the projection (root; about 10 minutes here).
WAN_RATE ?= 100mbit
diloco-wan: build
	/usr/bin/python3 scripts/diloco_wan.py build/bin/headroom-diloco --workers 4 --rate $(WAN_RATE) \
	  --inner-steps 100 --rounds 4 --out build/diloco-wan

# docs/RESULTS.md, "Calibrate your own machine": agent trace -> twin calibrate -> train -> eval
# against the real scenario's own policy (about 15 minutes here).
calibration-results: build
	./scripts/calibration_loop.sh $(HEADROOM) build/calibration-loop

# Issue 18: the shipped policies against static-safe, power-cap and pid at the default budget and
# under demand-response (docs/RESULTS.md, "Hybrid actuation"; about 5 minutes here).
hybrid-results: build
	./scripts/hybrid_results.sh $(HEADROOM) build/hybrid-results

# Issue 18: one policy across every scenario (train --family) and leave-one-scenario-out
# (docs/RESULTS.md, "The universal policy"; about 25 minutes on 2 cores).
universal-results: build
	./scripts/universal_results.sh $(HEADROOM) build/universal-results

# Three sites' spare power, one DiLoCo run (docs/SITE.md, "Several sites"): carbon per token
# by placement over a simulated day, and the loss by replay (about 10 minutes here).
sites-results: build
	/usr/bin/python3 scripts/sites_results.py $(HEADROOM) build/sites-results

# Issue 57: each baseline tuned to each violation target (0.1 %, 0.3 %, 1 %) beside the shipped
# policies (docs/RESULTS.md, "Issue 57: the operator's frontier"; about 3 minutes here).
frontier-results: build
	/usr/bin/python3 scripts/frontier_results.py $(HEADROOM) build/frontier-results

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf build build-asan build-tsan build-fuzz build-debug build-dev build-thread-safety
