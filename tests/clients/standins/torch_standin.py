"""Stand-in for `torch.distributed`: an initialized process group of one rank that records
every call. `generating` is set by the stand-ins around the generation call sites (TRL's
`self.llm.generate(...)`, vllm_generation.py:680); a collective called while it is set is
recorded as a violation -- the integrations must run none inside generation. Queries that talk
to no peer (is_initialized, get_rank, get_world_size, get_backend) are allowed.
"""

import threading
import types

distributed = types.ModuleType("torch.distributed")
_lock = threading.Lock()
calls = []        # (name, generating) for every call
violations = []   # names of collectives called while generating
generating = [False]

COLLECTIVES = ("all_gather_object", "broadcast_object_list", "barrier", "all_reduce",
               "broadcast", "gather_object", "all_gather", "reduce", "scatter")


def _record(name: str) -> None:
    with _lock:
        calls.append((name, generating[0]))
        if generating[0] and name in COLLECTIVES:
            violations.append(name)


def _query(name, value):
    def f(*args, **kwargs):
        _record(name)
        return value() if callable(value) else value
    f.__name__ = name
    return f


def _all_gather_object(output, obj, group=None):
    _record("all_gather_object")
    output[0] = obj  # one rank


def _broadcast_object_list(objs, src=0, group=None, device=None):
    _record("broadcast_object_list")


def _barrier(*args, **kwargs):
    _record("barrier")


distributed.is_available = _query("is_available", True)
distributed.is_initialized = _query("is_initialized", True)
distributed.get_rank = _query("get_rank", 0)
distributed.get_world_size = _query("get_world_size", 1)
distributed.get_backend = _query("get_backend", "gloo")
distributed.all_gather_object = _all_gather_object
distributed.broadcast_object_list = _broadcast_object_list
distributed.barrier = _barrier
distributed.group = types.SimpleNamespace(WORLD=None)
distributed.constants = types.SimpleNamespace()
