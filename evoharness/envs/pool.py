"""Environment stepping off the event loop: a pool of worker processes, each caching loaded games.

Loading an ALFWorld game is slow and resetting it is cheap, so each worker keeps up to ``cache_size``
idle environments per game and resets one for the next episode. Every open episode owns its own
``random`` state inside the worker, so episodes that interleave on one worker stay reproducible.
``workers=0`` runs environments in the calling process: the right choice for the fast engine, whose steps
take microseconds (processes would only add start-up and messaging); ``workers=None`` picks that for the
fast engine and two processes for the real one.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing as mp
import random
import threading
import traceback
from collections import OrderedDict
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Self

from evoharness.envs.alfworld import GameRecord, make_env
from evoharness.envs.base import Environment, StepResult, WorldFacts


class EnvWorkerError(RuntimeError):
    """An environment call failed inside a worker; the message carries the worker's traceback."""


@dataclass
class _Episode:
    env: Environment
    game_id: str
    rng_state: Any


class _EnvHost:
    """The part that runs inside a worker (or in-process): opens, steps and closes episodes."""

    def __init__(self, engine: str, expert: bool, cache_size: int) -> None:
        self.engine, self.expert, self.cache_size = engine, expert, cache_size
        self.idle: OrderedDict[str, list[Environment]] = OrderedDict()
        self.episodes: dict[int, _Episode] = {}

    def handle(self, op: str, handle: int, payload: Any) -> Any:
        if op == "open":
            game, seed = payload
            return self._open(handle, game, seed)
        episode = self.episodes[handle]
        if op == "close":
            self._close(handle)
            return None
        random.setstate(episode.rng_state)
        try:
            return episode.env.step(payload) if op == "step" else episode.env.facts()
        finally:
            episode.rng_state = random.getstate()

    def _open(self, handle: int, game: GameRecord, seed: int) -> StepResult:
        cached = self.idle.get(game.game_id)
        env = cached.pop() if cached else make_env(game, engine=self.engine, expert=self.expert)
        result = env.reset(seed=seed)  # seeds the global random; keep that stream for this episode
        self.episodes[handle] = _Episode(env=env, game_id=game.game_id, rng_state=random.getstate())
        return result

    def _close(self, handle: int) -> None:
        episode = self.episodes.pop(handle)
        self.idle.setdefault(episode.game_id, []).append(episode.env)
        self.idle.move_to_end(episode.game_id)
        while sum(len(envs) for envs in self.idle.values()) > self.cache_size:
            oldest_game, envs = next(iter(self.idle.items()))
            envs.pop(0).close()
            if not envs:
                del self.idle[oldest_game]


def _worker_main(engine: str, expert: bool, cache_size: int, requests: Connection, responses: Connection) -> None:
    host = _EnvHost(engine, expert, cache_size)
    while True:
        try:
            message = requests.recv()
        except EOFError:  # the parent is gone
            break
        if message is None:
            break
        request_id, op, handle, payload = message
        try:
            responses.send((request_id, True, host.handle(op, handle, payload)))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller, with its traceback
            responses.send((request_id, False, f"{exc!r}\n{traceback.format_exc()}"))


def default_workers(engine: str) -> int:
    """Worker processes worth having for ``engine``: none for the fast engine, two for the real one."""
    return 0 if engine == "fast" else 2


class EnvPool:
    """Async access to environments hosted in ``workers`` processes (least-loaded assignment)."""

    def __init__(self, workers: int | None = None, engine: str | None = None, expert: bool = False,
                 cache_size: int = 8) -> None:
        from evoharness.envs.alfworld import DEFAULT_ENGINE

        self.engine = engine or DEFAULT_ENGINE
        workers = default_workers(self.engine) if workers is None else workers
        self.workers = workers
        self._ids = itertools.count()
        self._local = _EnvHost(self.engine, expert, cache_size) if workers == 0 else None
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future, int]] = {}
        self._load = [0] * max(workers, 1)
        self._lock = threading.Lock()
        self._procs: list[Any] = []
        self._requests: list[Connection] = []  # one private pipe pair per worker: no lock a dead worker can hold
        self._responses: dict[Connection, int] = {}
        self._closing = threading.Event()
        self._dead: set[int] = set()
        if workers:
            ctx = mp.get_context("spawn")
            for worker in range(workers):
                request_reader, request_writer = ctx.Pipe(duplex=False)
                response_reader, response_writer = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_worker_main, daemon=True,
                                   args=(self.engine, expert, cache_size, request_reader, response_writer))
                proc.start()
                request_reader.close()  # the worker holds these ends now: a dead worker gives EOF / broken pipe
                response_writer.close()
                self._procs.append(proc)
                self._requests.append(request_writer)
                self._responses[response_reader] = worker
            self._reader = threading.Thread(target=self._read_responses, daemon=True)
            self._reader.start()

    # -- plumbing -------------------------------------------------------------------------------------
    def _read_responses(self) -> None:
        live = dict(self._responses)
        while live and not self._closing.is_set():
            for conn in wait(list(live), timeout=0.5):
                assert isinstance(conn, Connection)
                try:
                    request_id, ok, value = conn.recv()
                except (EOFError, OSError):
                    self._fail_worker(live.pop(conn))
                    continue
                with self._lock:
                    entry = self._pending.pop(request_id, None)
                if entry is not None:
                    loop, future, _ = entry
                    loop.call_soon_threadsafe(_settle, future, ok, value)
            for conn, worker in list(live.items()):
                if not self._procs[worker].is_alive() and not conn.poll():
                    self._fail_worker(live.pop(conn))

    def _fail_worker(self, worker: int) -> None:
        """Mark a worker dead and fail every call in flight on it (later calls fail at once)."""
        with self._lock:
            self._dead.add(worker)
            lost = [rid for rid, (_, _, w) in self._pending.items() if w == worker]
            entries = [self._pending.pop(rid) for rid in lost]
        for loop, future, _ in entries:
            loop.call_soon_threadsafe(_settle, future, False, f"environment worker {worker} died")

    async def _call(self, worker: int, op: str, handle: int, payload: Any) -> Any:
        if self._local is not None:
            try:
                return self._local.handle(op, handle, payload)
            except Exception as exc:
                raise EnvWorkerError(f"{exc!r}\n{traceback.format_exc()}") from exc
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        request_id = next(self._ids)
        with self._lock:  # registered under the lock that _fail_worker takes: no call can slip between them
            if worker in self._dead:
                raise EnvWorkerError(f"environment worker {worker} died")
            self._pending[request_id] = (loop, future, worker)
        try:
            self._requests[worker].send((request_id, op, handle, payload))
        except OSError as exc:  # broken pipe: the worker is gone
            with self._lock:
                self._pending.pop(request_id, None)
            raise EnvWorkerError(f"environment worker {worker} died ({exc!r})") from exc
        return await future

    # -- public API -----------------------------------------------------------------------------------
    async def open(self, game: GameRecord, seed: int) -> tuple[RemoteEnv, StepResult]:
        alive = [w for w in range(len(self._load)) if w not in self._dead]
        if not alive:
            raise EnvWorkerError("every environment worker died")
        worker = min(alive, key=self._load.__getitem__)
        handle = next(self._ids)
        self._load[worker] += 1
        try:
            first = await self._call(worker, "open", handle, (game, seed))
        except BaseException:
            self._load[worker] -= 1
            raise
        return RemoteEnv(self, worker, handle), first

    def close(self) -> None:
        for requests in self._requests:
            try:
                requests.send(None)
            except OSError:
                pass  # that worker is already gone; nothing to stop
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        self._closing.set()
        if self._procs:
            self._reader.join(timeout=10)
        for conn in [*self._requests, *self._responses]:
            conn.close()
        self._procs.clear()
        self._requests.clear()
        self._responses.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _settle(future: asyncio.Future, ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(EnvWorkerError(value))


@dataclass
class RemoteEnv:
    """One open episode's environment inside the pool."""

    pool: EnvPool
    worker: int
    handle: int

    async def step(self, command: str) -> StepResult:
        return await self.pool._call(self.worker, "step", self.handle, command)

    async def facts(self) -> WorldFacts:
        return await self.pool._call(self.worker, "facts", self.handle, None)

    async def release(self) -> None:
        """Return the environment to its worker's cache (it stays loaded for the next episode)."""
        try:
            await self.pool._call(self.worker, "close", self.handle, None)
        finally:
            self.pool._load[self.worker] -= 1
