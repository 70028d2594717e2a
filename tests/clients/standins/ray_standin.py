"""Stand-in for Ray (`import ray`), as verl b178a3c and OpenRLHF 3c3be62 use it: `ray.remote`
on classes, `.options(...).remote(...)` to build an actor, `actor.method.remote(...)` returning
a ref that `ray.get`, `ray.wait` and `await` take, and `ActorClass.__ray_metadata__
.modified_class` (the class behind the decorator, as Ray keeps it).

Ray's processes replaced by threads: every async actor (a class with a coroutine method, Ray's
rule) runs on one shared event loop thread, "the cluster"; every other actor has a thread and
loop of its own, running its methods one at a time (Ray's default for sync actors), so a method
that blocks in ray.get blocks its actor only. A ref is a concurrent.futures.Future. An actor's
constructor may be a coroutine (`async def __init__`, as OpenRLHF's RolloutRayActor): it is
awaited. Nothing is pickled, nothing is placed: options() are accepted and ignored.
"""

import asyncio
import concurrent.futures
import inspect
import threading
import types
from typing import Any, List, Optional, Tuple


class _LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def submit(self, coro: Any) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5.0)
        if not self.thread.is_alive():
            self.loop.close()


_lock = threading.Lock()
_cluster: Optional[_LoopThread] = None
_sync_actors: List[_LoopThread] = []


def init(**kwargs: Any) -> None:
    global _cluster
    with _lock:
        if _cluster is None:
            _cluster = _LoopThread("ray-standin-cluster")


def is_initialized() -> bool:
    return _cluster is not None


def shutdown() -> None:
    global _cluster
    with _lock:
        for t in _sync_actors:
            t.stop()
        _sync_actors.clear()
        if _cluster is not None:
            _cluster.stop()
            _cluster = None


def cluster_loop() -> asyncio.AbstractEventLoop:
    init()
    assert _cluster is not None
    return _cluster.loop


class ObjectRef:
    """A call's result to come: ray.get() it from a thread, or await it on a loop."""

    def __init__(self, future: concurrent.futures.Future) -> None:
        self.future = future

    def __await__(self) -> Any:
        return asyncio.wrap_future(self.future).__await__()


def _is_async_class(cls: type) -> bool:
    return any(inspect.iscoroutinefunction(getattr(cls, n, None)) for n in dir(cls)
               if not n.startswith("__") or n == "__init__")


class _Method:
    def __init__(self, handle: "ActorHandle", name: str) -> None:
        self.handle, self.name = handle, name

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef:
        return self.handle._call(self.name, args, kwargs)


class ActorHandle:
    def __init__(self, instance: Any, runner: _LoopThread) -> None:
        self._instance = instance
        self._runner = runner

    def _call(self, name: str, args: tuple, kwargs: dict) -> ObjectRef:
        method = getattr(self._instance, name)

        async def run() -> Any:
            out = method(*args, **kwargs)
            if inspect.isawaitable(out):
                out = await out
            return out
        return ObjectRef(self._runner.submit(run()))

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(self, name)


class _Metadata:
    def __init__(self, cls: type) -> None:
        self.modified_class = cls


class ActorClass:
    def __init__(self, cls: type, options: Optional[dict] = None) -> None:
        self.__ray_metadata__ = _Metadata(cls)
        self._options = dict(options or {})

    def options(self, **options: Any) -> "ActorClass":
        return ActorClass(self.__ray_metadata__.modified_class, dict(self._options, **options))

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        cls = self.__ray_metadata__.modified_class
        if _is_async_class(cls):
            runner = _cluster_runner()
        else:
            runner = _LoopThread("ray-standin-actor-%s" % cls.__name__)
            with _lock:
                _sync_actors.append(runner)
        instance = cls.__new__(cls)

        async def construct() -> None:
            out = cls.__init__(instance, *args, **kwargs)
            if inspect.isawaitable(out):
                await out
        fut = runner.submit(construct())
        if threading.current_thread() is not runner.thread:
            fut.result()  # Ray builds actors asynchronously; here, before the handle is used
        return ActorHandle(instance, runner)


def _cluster_runner() -> _LoopThread:
    init()
    assert _cluster is not None
    return _cluster


def remote(*args: Any, **kwargs: Any) -> Any:
    """@ray.remote, @ray.remote(num_cpus=...), or ray.remote(cls): an ActorClass."""
    if len(args) == 1 and not kwargs and isinstance(args[0], type):
        return ActorClass(args[0])
    return lambda cls: ActorClass(cls, kwargs)


def get(refs: Any, timeout: Optional[float] = None) -> Any:
    if isinstance(refs, (list, tuple)):
        return [get(r, timeout) for r in refs]
    return refs.future.result(timeout)


def wait(refs: List[ObjectRef], num_returns: int = 1, timeout: Optional[float] = None
         ) -> Tuple[List[ObjectRef], List[ObjectRef]]:
    by_future = {r.future: r for r in refs}
    done: List[ObjectRef] = []
    pending = set(by_future)
    while len(done) < num_returns and pending:
        d, pending = concurrent.futures.wait(pending, timeout,
                                             return_when=concurrent.futures.FIRST_COMPLETED)
        if not d:
            break
        done.extend(by_future[f] for f in d)
    ready = done[:num_returns]
    rest = [r for r in refs if r not in ready]
    return ready, rest


def cancel(ref: ObjectRef) -> None:
    ref.future.cancel()


util = types.SimpleNamespace()
