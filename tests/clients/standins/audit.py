"""Auditors the integration tests hang on a stand-in engine's step hook (LLMEngine.on_step,
called after the scheduler picked this step's running set): they check the engine against the
cap in force, independently of the integration's own bookkeeping.

StepAuditor, for a refill loop that adds to the engine itself (TRL): cap() is the cap the loop
read before this step, pending() the sequences it has not added yet.
GateAuditor, for a gate in front of an async engine (verl, OpenRLHF): gate() is the engine's
CountingGate (limit, in_flight, waiting).
"""


class StepAuditor:
    """At every step: nothing added while the cap in force is reached; in flight above the cap
    only while draining after it was lowered (never rising); while sequences wait to be added,
    in flight = the cap (continuous admission); running = min(in flight, max_num_seqs)."""

    def __init__(self, cap, pending):
        self.cap, self.pending = cap, pending
        self.prev = 0
        self.violations = []
        self.at_cap_while_waiting = set()  # caps seen with sequences waiting and in flight = cap

    def __call__(self, engine):
        seqs, cap, pending = engine.num_sequences, self.cap(), self.pending()
        added = engine.added_since_step
        where = "step %d: in flight %d, cap %d, waiting %d, added %d" % (
            engine.steps, seqs, cap, pending, added)
        if added and seqs > cap:
            self.violations.append("added above the cap: " + where)
        if seqs > max(cap, self.prev):
            self.violations.append("above the cap without draining: " + where)
        if pending and seqs < cap:
            self.violations.append("below the cap while sequences wait: " + where)
        if engine.num_running != min(seqs, engine.max_num_running_reqs):
            self.violations.append("running %d: " % engine.num_running + where)
        if pending and seqs == cap:
            self.at_cap_while_waiting.add(cap)
        self.prev = seqs


class GateAuditor:
    """At every step of an engine behind a gate: the engine holds exactly what the gate admitted
    (every admitted request has arrived, every finished one was released); nothing was added
    above the limit; above it only while draining; while requests wait at the gate, the engine
    runs at the limit. The limit may change at any moment (a follower's resize from its thread):
    a step right after it changed is checked against the larger of the two limits, and spared
    the arrival checks (the requests a raise admits are on their way, a few loop iterations)."""

    def __init__(self, gate):
        self.gate = gate
        self.prev = 0
        self.prev_limit = None
        self.steps = 0
        self.violations = []
        self.at_cap_while_waiting = set()
        self.max_in_flight = 0
        self.trace = []  # (step, in engine, admitted, limit, waiting), for failure messages

    def __call__(self, engine):
        g = self.gate()
        seqs, limit, admitted, waiting = engine.num_sequences, g.limit, g.in_flight, g.waiting
        settled = limit == self.prev_limit
        where = "step %d: in engine %d, admitted %d, limit %d, waiting %d, added %d" % (
            engine.steps, seqs, admitted, limit, waiting, engine.added_since_step)
        if seqs > admitted or (settled and seqs != admitted):
            self.violations.append("engine and gate differ: " + where)
        bound = limit if settled or self.prev_limit is None else max(limit, self.prev_limit)
        if engine.added_since_step and seqs > bound:
            self.violations.append("added above the limit: " + where)
        if seqs > max(bound, self.prev):
            self.violations.append("above the limit without draining: " + where)
        if settled and waiting and seqs < limit:
            self.violations.append("below the limit while requests wait: " + where)
        if waiting and seqs == limit:
            self.at_cap_while_waiting.add(limit)
        self.prev, self.prev_limit = seqs, limit
        self.max_in_flight = max(self.max_in_flight, seqs)
        self.trace.append((engine.steps, seqs, admitted, limit, waiting))
        self.steps += 1
