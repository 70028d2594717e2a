"""Client of the headroom agent's actuation API, standard library only (Python 3.8+).

    from headroom_client import AgentClient
    client = AgentClient("http://127.0.0.1:10470", safe_concurrency=4, safe_group_size=8)
    a = client.actuation()              # {"concurrency", "group_size", "seq", "valid_for_s", "reason"}
    a = client.actuation(wait_s=10)     # long-poll: returns as soon as a newer decision exists
    a = client.actuation_for_step(3)    # step 3's decision: the same group size and hold on every rank
    client.report(step=3, phase="rollout", tokens=12000, in_flight=7, admission="continuous")
    client.status()                     # GET /v1/status as a dict, or None

Never raises into the trainer, never waits or reads without bound: one deadline on a whole
answer (timeout_s, plus a long-poll's wait), at most max_answer_bytes read (1 MiB), no redirect
followed (the token goes to base_url's host only), bounded JSON. A decision's values are bounded
before the trainer sees them: concurrency and group size clamped to max_concurrency and
max_group_size (when given; above MAX_COUNT not a decision), valid_for_s to max_valid_for_s
(60 s). While the agent does not answer, the last decision is used until its (capped)
`valid_for_s` runs out, and then the safe values (reason "fallback: ...") -- except in a site
(the agent's answers say "site": true, or site=True here): there the trainer fails closed, and
the fallback holds it at its step boundary (take_hold) until the agent answers again.
AgentClient is thread-safe (one lock around its last decision, last hold, reachable and site).

At each step boundary, a trainer takes its holds (a site staggering its jobs, or not admitting
one yet) before it starts the step -- every rank, at its own boundary, never inside a
collective, reading the decision for its step so that all ranks take the same hold:

    a = client.actuation_for_step(step)
    while (hold := client.take_hold(a)) > 0:
        client.report(step, "idle", tokens, 0)       # from one rank
        time.sleep(hold)
        a = client.actuation_for_step(step)

The agent's `max_hold_s` (its /v1/status) must stay below the trainer's collective timeout:
HeadroomCallback checks it at start (CollectiveTimeoutError).

For a trainer's loop (clients/python/README.md):
- `HeadroomCallback`: the step boundary above and phase reports, a transformers
  TrainerCallback (its subclass when transformers is imported first), per rank.
- `Heartbeat`: the trainer's state re-sent to the agent from a background thread, every 5 s and
  at each change; update() never blocks the loop.
- `ConcurrencyGate` (asyncio), `ThreadConcurrencyGate` (threads) and `CapFollower`: continuous
  admission, a new sequence as soon as one ends while fewer than the agent's concurrency are in
  flight, the gates resized by a thread long-polling the agent.
- `batched`: chunks of the current concurrency, only for engines with no per-request API (a
  chunk waits for its longest sequence: occupancy decays inside it).
- `rank0_actuation`: a collective, rank 0 reads and every rank of a torch.distributed group gets
  the decision, for trainers that want one.
"""

from .adapters import (CollectiveTimeoutError, HeadroomCallback, batched, collective_timeout,
                       rank0_actuation)
from .client import (ADMISSIONS, DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_VALID_FOR_S, MAX_COUNT,
                     MAX_HOLD_S, MAX_WAIT_S, PHASES, STANDBY_WAIT_S, AgentClient)
from .gates import CapFollower, ConcurrencyGate, ThreadConcurrencyGate
from .heartbeat import Heartbeat

# The project's version (top-level CMakeLists.txt, project(headroom VERSION ...)); also in
# pyproject.toml. tests/clients/package_test.py checks that the three agree.
__version__ = "0.1.0"

__all__ = ["AgentClient", "ConcurrencyGate", "ThreadConcurrencyGate", "CapFollower", "Heartbeat",
           "batched", "rank0_actuation", "HeadroomCallback", "CollectiveTimeoutError",
           "collective_timeout", "__version__", "MAX_WAIT_S", "MAX_HOLD_S", "STANDBY_WAIT_S",
           "PHASES", "ADMISSIONS", "MAX_COUNT", "DEFAULT_MAX_VALID_FOR_S",
           "DEFAULT_MAX_ANSWER_BYTES"]
