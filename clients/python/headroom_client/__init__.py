"""Client of the headroom agent's actuation API, standard library only (Python 3.8+).

    from headroom_client import AgentClient, ConcurrencyGate
    client = AgentClient("http://127.0.0.1:10470", safe_concurrency=4, safe_group_size=8)
    a = client.actuation()              # {"concurrency", "group_size", "seq", "valid_for_s", "reason"}
    a = client.actuation(wait_s=10)     # long-poll: returns as soon as a newer decision exists
    client.report(step=3, phase="rollout", tokens=12000, in_flight=7)

Never raises on network errors: while the agent does not answer, the last decision is used until
its `valid_for_s` runs out, and then the safe values (reason "fallback: ...") -- except in a site
(the agent's answers say "site": true, or site=True here): there the trainer fails closed, and
the fallback holds it at its step boundary (take_hold) until the agent answers again.

At each step boundary, a trainer takes its holds (a site staggering its jobs, or not admitting
one yet) before it starts the step:

    a = client.actuation()
    while (hold := client.take_hold(a)) > 0:
        client.report(step, "idle", tokens, 0)
        time.sleep(hold)
        a = client.actuation()

Adapters for a trainer's loop (headroom_client.adapters; clients/python/README.md): `batched`
(a batched generate call in chunks of the current concurrency), `ConcurrencyGate` (the same
for an async engine), `rank0_actuation` (one rank reads, every rank of a torch.distributed
group gets the decision) and `HeadroomCallback` (the step boundary above and phase reports, in
the shape of an HF-style trainer callback).
"""

from .adapters import ConcurrencyGate, HeadroomCallback, batched, rank0_actuation
from .client import MAX_HOLD_S, MAX_WAIT_S, STANDBY_WAIT_S, AgentClient

# The project's version (top-level CMakeLists.txt, project(headroom VERSION ...)); also in
# pyproject.toml. tests/clients/package_test.py checks that the three agree.
__version__ = "0.1.0"

__all__ = ["AgentClient", "ConcurrencyGate", "batched", "rank0_actuation", "HeadroomCallback",
           "__version__", "MAX_WAIT_S", "MAX_HOLD_S", "STANDBY_WAIT_S"]
