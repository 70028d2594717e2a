#pragma once
// One worker of an elastic DiLoCo run (or of its data-parallel baseline), on a Store (etcd) for
// membership and a Communicator per group for the collectives (docs/DILOCO.md).
//
// The invariant: every member of a completed round holds the same model bits afterwards (the
// SHA-256 each publishes agrees), and that model is the previous round's plus the outer step
// on the aggregate of that round's accepted contributions. A member whose hash differs is
// evicted and resynced; a member that dies, stalls or arrives after the round's group closed
// is left out of that round, never waited for past the round's deadline or its lease.
//
// Store layout, under /headroom-diloco/<run>/ (JSON values):
//   config                      the run's settings (with "init", the starting checkpoint's
//                               SHA-256, when there is one); the first worker writes it,
//                               every other must match it
//   members/<id>                {"name", "pid", "joined_round"} under the member's lease;
//                               joined_round -1 while it syncs; id = the lease, in hex
//   rounds/<r>/<a>/arrive/<id>  member id is at round r's boundary, attempt a (lease)
//   rounds/<r>/<a>/group        {"members": [ids]}: attempt a's group, written once
//   rounds/<r>/<a>/gloo/...     the group's rendezvous
//   rounds/<r>/hash/<id>        the member's model hash after round r
//   rounds/<r>/agreed           {"hash", "members", "tokens", "val_loss", "round"}: by the
//                               round's donor (the lowest rank with the majority hash)
//   joins/<id>, joins/<id>/serve  a (re)joining member's request; the donor's answer
//   control/<name>              {"threads", "duty", "leave"}: asked of the worker at run time
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "coord/store.h"
#include "diloco/accounting.h"
#include "diloco/model.h"
#include "diloco/round_group.h"
#include "diloco_comm/communicator.h"
#include "diloco_core/compress.h"
#include "diloco_core/contribution.h"
#include "diloco_core/outer.h"
#include "diloco_core/scatter.h"

namespace headroom::diloco {

// Test and demo fault injection: what a hostile worker sends instead of its pseudo-gradient.
enum class Hostility { kNone, kScale, kFlip, kNan, kForge };
Result<Hostility> ParseHostility(const std::string& name);  // none, scale, flip, nan, forge

struct WorkerOptions {
  std::string run = "default";
  std::string name;             // shown in logs and the JSON; defaults to "worker-<pid>"
  std::string mode = "diloco";  // or "ddp"
  std::string model = "tiny";   // the run's config names it; the factory builds it
  int inner_steps = 100;        // H
  int rounds = 10;              // R (ddp: R x H steps)
  int batch = 8;
  int seq_len = 128;
  int threads = 1;
  std::uint64_t seed = 1;
  OuterOptions outer;
  Codec codec = Codec::kInt8;
  ScreenOptions screen;
  Aggregation aggregate = Aggregation::kTrimmedMean;  // mean: reduce-scatter, no screen
  // Streaming DiLoCo (diloco/stream.h): N fragments, N - 1 of them synced during the round on a
  // thread of their own (false: at once, on the worker's thread: a test on a simulated clock).
  int stream_fragments = 1;
  bool stream_in_background = true;
  std::vector<std::uint8_t> key;  // the run's HMAC key (empty: the run's name, unauthenticated)
  double lease_ttl_s = 5.0;
  bool renew_in_background = true;  // a thread renews the lease every TTL / 3 (LeaseKeeper)
  double collective_timeout_s = 5.0;
  double min_deadline_s = 5.0;   // a round's group closes at most this long after I arrive...
  double deadline_factor = 0.5;  // ...or this times my round's compute time, if longer
  int start_workers = 1;         // round 0 waits (up to min_deadline_s) for this many members
  int eval_every = 1;            // rounds between validation losses (the donor's)
  // The energy model (diloco_core/run_report.h, EnergyModel): modelled figures.
  double cpu_watts_per_core = kDefaultCpuWattsPerCore;
  double idle_watts_per_worker = kDefaultIdleWattsPerWorker;
  double network_j_per_byte = kDefaultNetworkJPerByte;
  // The duty cycle a power grant allows now (docs/DILOCO.md, "On spare power"), given the
  // worker's threads and the duty it would run at otherwise; consulted after every inner step
  // and before every step (in memory: the fleet member runs on its own thread). Below 0.05:
  // paused at once, and
  // out of the run at the next round boundary until the grant returns. Unset: no grant.
  std::function<double(int threads, double duty)> granted_duty;
  // Told when the worker starts and stops computing (waiting, communicating, paused: not
  // drawing its compute power), so that the grant is acknowledged while nobody asks for it.
  std::function<void(bool computing)> computing;
  // The run's starting model instead of the seed's initialisation: a checkpoint's parameters
  // (`--init-checkpoint`). Its SHA-256 joins the run's config, so every member starts from it.
  std::vector<float> init_parameters;
  Hostility hostility = Hostility::kNone;
  int hostile_from_round = 0;
  std::string out_dir;  // the worker's JSON and the final checkpoint (the donor's)
};

// Runs the worker to the end of the run (or until asked to leave), on a model from `model`.
Result<WorkerReport> RunWorker(coord::Store& store, const CommFactory& comm,
                               const ModelFactory& model, const WorkerOptions& options,
                               const WorkerClock& clock);

// The run's loss curve and totals as the store has them (for `diloco local`).
struct RunSummary {
  std::vector<LossPoint> loss_curve;
  int rounds = 0;
  bool hashes_agreed = true;
  int membership_changes = 0;
  int rejected = 0;        // contributions excluded by the screen, over every round
  int hash_evictions = 0;  // members whose hash differed from their round's
  std::uint64_t tokens = 0;
};
Result<RunSummary> ReadRunSummary(coord::Store& store, const std::string& run);

}  // namespace headroom::diloco
