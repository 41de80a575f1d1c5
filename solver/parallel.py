"""Run independent tasks on this machine's cores or as Ray tasks, with bounded retries.

`map_tasks(fn, items, backend, address)` calls `fn(*args)` for every `args` tuple in `items` and
yields a `Done` per item as tasks finish (in finishing order, `Done.index` is the item's place):

- `backend="local"`: a process pool of `jobs` processes (default one per core); `jobs=1` runs in
  this process. A worker process that dies breaks the pool: the pool is rebuilt and the tasks that
  were running are tried again.
- `backend="ray"`: one Ray task per item on the cluster at `address` (`ray.init(address=...)`), or
  a local Ray instance when no address is given and none is running; an already initialized Ray
  is used as it is and left running. `num_cpus` is what a task reserves (capped at the smallest
  node's CPUs, so every node can take tasks). A task whose worker dies is retried by Ray.

Either way a task is tried at most `1 + max_retries` times when its worker dies; an exception
raised by `fn` itself is deterministic and is not retried. A task that fails for good yields
`Done(index, error="...")` instead of stopping the others. Large read-only inputs shared by every
task go in `shared` ({name: object}); an argument `Shared(name)` stands for `shared[name]`, which
is shipped once (`ray.put`; a pool initializer for local processes), not once per task. A caller
making many calls keeps one `RaySession`: Ray stays up between them and `session.share(shared)`
puts each object once (an `ObjectRef` in `shared` is passed on as it is, not put again).

Ctrl-C (KeyboardInterrupt) cancels every outstanding task, kills running ones and propagates. A
caller that stops reading early (closes the iterator: a deadline) cancels the queued Ray tasks and
lets running ones finish, so their warm workers stay for the next call.

`fn` must be importable by the workers (a module-level function of an installed package) or be
pickled by value (`ray.cloudpickle.register_pickle_by_value(module)`). A later shape-set search
can evaluate its neighbours through this, e.g.
`for d in map_tasks(evaluate, [(Shared("inst"), s) for s in neighbours], backend, address,
shared={"inst": instance}): ...`.
"""
from __future__ import annotations

import logging
import os
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from models.errors import InputError

log = logging.getLogger(__name__)
BACKENDS = ("local", "ray")
RAY_MISSING = 'the ray backend needs Ray, an optional extra: pip install -e ".[ray]"'
POLL_S = 0.5


@dataclass(frozen=True)
class Shared:
    """Stands for `shared[name]` in a task's arguments."""

    name: str


@dataclass
class Done:
    """One finished item: its value, or the error that made it fail for good."""

    index: int
    value: Any = None
    error: str | None = None
    attempts: int = 1


def import_ray():
    """Ray, or InputError with the install command when the extra is not installed."""
    try:
        import ray
    except ImportError:
        raise InputError(RAY_MISSING) from None
    return ray


def check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    if backend == "ray":
        import_ray()


def map_tasks(fn: Callable, items: Sequence[tuple], backend: str = "local", address: str | None = None, *,
              jobs: int = 0, num_cpus: int = 1, max_retries: int = 2, shared: dict | None = None,
              on_start: Callable[[int], None] | None = None, verbose: bool = True) -> Iterator[Done]:
    """fn(*args) for every args in items, as tasks finish (see the module doc). `on_start(index)` is
    called when a task is handed to a worker (progress counts); `verbose=False` logs the Ray layout at
    debug level only (a caller mapping many small batches)."""
    check_backend(backend)
    if not items:
        return iter(())
    run = ray_tasks if backend == "ray" else local_tasks
    return run(fn, list(items), address=address, jobs=jobs, num_cpus=num_cpus, max_retries=max_retries,
               shared=shared or {}, on_start=on_start or (lambda i: None), verbose=verbose)


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


# --- local: a process pool ---------------------------------------------------------------------------

_SHARED: dict = {}


def _set_shared(shared: dict) -> None:
    global _SHARED
    _SHARED = shared


def _call(fn, args):
    return fn(*[_SHARED[a.name] if isinstance(a, Shared) else a for a in args])


def local_tasks(fn, items, *, address, jobs, num_cpus, max_retries, shared, on_start, verbose) -> Iterator[Done]:
    jobs = min(jobs or os.cpu_count() or 1, len(items))
    if jobs <= 1:
        yield from in_process(fn, items, shared, on_start)
        return
    queue, suspects, deaths = list(range(len(items))), [], [0] * len(items)
    while queue or suspects:
        if suspects:        # after a pool broke: its tasks in flight one at a time, so a death is that task's
            suspects = (yield from pool_round(fn, items, 1, shared, suspects, deaths, max_retries, on_start)) \
                + suspects
        else:
            suspects = yield from pool_round(fn, items, jobs, shared, queue, deaths, max_retries, on_start)


def in_process(fn, items, shared, on_start) -> Iterator[Done]:
    _set_shared(shared)
    for i, args in enumerate(items):
        on_start(i)
        try:
            yield Done(i, value=_call(fn, args))
        except Exception as exc:
            log.debug("task %d failed", i, exc_info=True)
            yield Done(i, error=one_line(exc))


def pool_round(fn, items, jobs, shared, queue, deaths, max_retries, on_start):
    """Run tasks from the front of `queue` on one pool until it is empty or the pool breaks (a worker
    process died); returns the tasks in flight then. When one task alone was in flight, the death is
    its own: it is counted, and the task given up after `max_retries` tries again."""
    pool = ProcessPoolExecutor(jobs, initializer=_set_shared, initargs=(shared,))
    running, broken = {}, False
    try:
        while (queue or running) and not broken:
            broken = submit_some(pool, fn, items, jobs, queue, running, on_start)
            finished, _ = wait(running, timeout=POLL_S, return_when=FIRST_COMPLETED)
            for fut in finished:
                try:
                    yield Done(running[fut], value=fut.result(), attempts=deaths[running[fut]] + 1)
                except BrokenProcessPool:
                    broken = True
                    continue
                except Exception as exc:
                    yield Done(running[fut], error=one_line(exc), attempts=deaths[running[fut]] + 1)
                del running[fut]
    finally:
        kill_pool(pool)
    died = sorted(running.values())
    if len(died) > 1:
        log.warning("a worker process died with %d tasks in flight: trying them again one at a time", len(died))
    if len(died) != 1:
        return died
    deaths[died[0]] += 1
    if deaths[died[0]] > max_retries:
        yield Done(died[0], error=f"worker process died ({deaths[died[0]]} attempts)", attempts=deaths[died[0]])
        return []
    log.warning("a worker process died: task %d tried again (%d of %d)", died[0], deaths[died[0]], max_retries)
    return died


def submit_some(pool, fn, items, jobs, queue, running, on_start) -> bool:
    """Fill the pool up to `jobs` tasks in flight; True when the pool is broken."""
    while queue and len(running) < jobs:
        i = queue[0]
        try:
            fut = pool.submit(_call, fn, items[i])
        except BrokenProcessPool:
            return True
        queue.pop(0)
        running[fut] = i
        on_start(i)
    return False


def kill_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what is queued and end the worker processes now (a running CP-SAT search would go on)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
    for proc in processes:
        proc.join(5)


# --- ray -----------------------------------------------------------------------------------------------

def ray_start(ray, address: str | None) -> bool:
    """Connect to (or start) Ray; True when this call started it (and so must shut it down)."""
    if ray.is_initialized():
        return False
    kwargs = {"address": address, "log_to_driver": False, "logging_level": logging.WARNING}
    if address is None and not os.environ.get("RAY_ADDRESS"):     # a new local instance, loopback only
        kwargs.update(address="local", include_dashboard=False, _node_ip_address="127.0.0.1")
    ray.init(**kwargs)
    return True


def node_cpus(ray) -> list[int]:
    cpus = [int(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n.get("Alive")]
    return [c for c in cpus if c > 0] or [1]


def ray_tasks(fn, items, *, address, jobs, num_cpus, max_retries, shared, on_start, verbose) -> Iterator[Done]:
    ray = import_ray()
    started = ray_start(ray, address)
    try:
        yield from ray_loop(ray, fn, items, jobs, num_cpus, max_retries, shared, on_start, verbose)
    finally:
        if started:
            ray.shutdown()


def ray_loop(ray, fn, items, jobs, num_cpus, max_retries, shared, on_start, verbose=True) -> Iterator[Done]:
    cpus = node_cpus(ray)
    per_task = max(1, min(num_cpus, min(cpus)))
    if per_task < num_cpus:
        log.info("ray: %d CPUs per task asked, the smallest node has %d: reserving %d", num_cpus, min(cpus), per_task)
    jobs = jobs or max(1, sum(c // per_task for c in cpus))
    remote = ray.remote(_ray_call).options(num_cpus=per_task, max_retries=max_retries, retry_exceptions=False)
    refs = {name: obj if isinstance(obj, ray.ObjectRef) else ray.put(obj) for name, obj in shared.items()}
    log.log(logging.INFO if verbose else logging.DEBUG, "ray: %d tasks on %d node(s) (%s CPUs), %d CPU(s) each, "
            "%d in flight", len(items), len(cpus), "+".join(map(str, cpus)), per_task, jobs)
    fn_ref = ray.put(fn)
    queue, running = list(range(len(items))), {}
    try:
        while queue or running:
            while queue and len(running) < jobs:
                i = queue.pop(0)
                args = [refs[a.name] if isinstance(a, Shared) else a for a in items[i]]
                running[remote.remote(fn_ref, *args)] = i
                on_start(i)
            ready, _ = ray.wait(list(running), num_returns=1, timeout=POLL_S)
            for ref in ready:
                yield ray_done(ray, running.pop(ref), ref, max_retries)
    except BaseException as exc:
        force = not isinstance(exc, GeneratorExit)   # a caller done early (a deadline) keeps the warm workers
        for ref in running:
            ray.cancel(ref, force=force)
        raise


def _ray_call(fn, *args):
    return fn(*args)


def ray_done(ray, i: int, ref, max_retries: int) -> Done:
    try:
        return Done(i, value=ray.get(ref))
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None) or exc
        return Done(i, error=one_line(cause))
    except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError) as exc:
        return Done(i, error=f"worker died ({1 + max_retries} attempts): {one_line(exc)}", attempts=1 + max_retries)
    except ray.exceptions.RayError as exc:
        return Done(i, error=one_line(exc))


class RaySession:
    """One Ray connection for many `map_tasks` calls (e.g. every step of a search): connected on first
    use (`ray_start`: the cluster at `address`, else a local instance), shared objects put into the
    object store once by name (`share`), and shut down by `close` only when this session started it."""

    def __init__(self, address: str | None = None):
        self.address = address
        self.ray = None
        self.started = False
        self.refs: dict = {}

    def connect(self):
        if self.ray is None:
            self.ray = import_ray()
            self.started = ray_start(self.ray, self.address)
        return self.ray

    def share(self, shared: dict) -> dict:
        """{name: ObjectRef} for `shared` ({name: object}); an object already put under its name is not put again."""
        ray = self.connect()
        for name, obj in shared.items():
            if name not in self.refs:
                self.refs[name] = ray.put(obj)
        return {name: self.refs[name] for name in shared}

    def cpus(self) -> int:
        """CPUs of the live nodes."""
        return sum(node_cpus(self.connect()))

    def close(self) -> None:
        if self.ray is not None and self.started and self.ray.is_initialized():
            self.ray.shutdown()
        self.ray, self.started, self.refs = None, False, {}
