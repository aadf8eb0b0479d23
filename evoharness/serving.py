"""Serve a local model folder over an OpenAI-compatible HTTP API, in a child process: ``transformers serve`` or
this package's engine server (:mod:`evoharness.engine_server`, which honours structured outputs).

On a GPU, ``vllm serve`` is the equivalent, started the same way by hand. Both CPU servers need FastAPI and Uvicorn,
the engine server also xgrammar (``pip install "evoharness[serve]"``). The child listens on a loopback port, the
model is preloaded and named by its folder path, and every request is answered by it:

    with ServedModel("models/expert-sft-…/model") as served:
        served.base_url, served.model   # → `evoharness teacher add NAME --provider openai_compatible ...`

``transformers serve`` decodes greedily unless the model's ``generation_config.json`` samples (``do_sample``): a
request's ``temperature`` alone does not turn sampling on; a Qwen3-family model's ``<think>…</think>`` block comes
back split off, in the message's ``reasoning_content`` field. The engine server samples when a request's
``temperature`` is above 0 and returns the thought in the content, as local play decodes it.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

Server = Literal["evoharness", "transformers"]
SERVE_MODULES: dict[Server, tuple[str, ...]] = {"transformers": ("fastapi", "uvicorn"),
                                                "evoharness": ("fastapi", "uvicorn", "xgrammar")}
"""What each server imports beyond transformers itself."""


class ServingError(RuntimeError):
    """The server cannot start or did not come up; the message names the cause and the fix."""


def missing_serve_modules(server: Server = "evoharness") -> list[str]:
    """The modules ``server`` needs that are not installed here."""
    return [name for name in SERVE_MODULES[server] if importlib.util.find_spec(name) is None]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """Whether something listens on ``host:port`` (a port left in TIME_WAIT counts as free, as for the server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def stop_on_signals() -> None:
    """Let SIGTERM and SIGHUP end this process the way Ctrl-C does (``KeyboardInterrupt``), so that ``finally``
    blocks and context managers run: by default they end it at once, and a served model's child would be left
    running."""
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupt)


CB_PAGE_TOKENS = 256
"""Tokens per page of transformers' paged cache (its ``ContinuousBatchingConfig.page_size`` default)."""


@dataclass(frozen=True)
class ServeSettings:
    """How the server runs. ``port`` None: a free one. ``startup_timeout_s`` bounds loading and the first /health.
    ``continuous_batching``: requests in flight decode together (paged attention): with 16 student turns in flight
    1.47× the turns per second of the plain server on 2 CPU cores, with the same greedy completions; no slower with
    one (``benchmarks/results/serve_throughput.json``). ``kv_cache_tokens``: the paged cache's capacity (requests in
    flight × their longest context); left to transformers, the cache takes about 90 % of the free memory, on a CPU
    the machine's RAM, and the server is killed when another process needs it; a sized cache answers as fast
    (``docs/results.md``, "A GRPO step's passes and a served student"). ``threads``: the server's torch threads
    (its ``OMP_NUM_THREADS``); None: this process's setting. ``server``: ``evoharness`` (:mod:`evoharness.engine_server`,
    ``max_batch`` completions decoded together) or ``transformers`` (``transformers serve``; ``continuous_batching``
    and ``kv_cache_tokens`` are its). The engine server is the default: given the turn grammar it played 40 of 40
    train games action for action as the same student locally, and ``transformers serve``, which ignores the
    grammar, as the student unconstrained (``benchmarks/results/served_gap.json``)."""

    server: Server = "evoharness"
    host: str = "127.0.0.1"
    port: int | None = None
    device: str = "cpu"
    startup_timeout_s: float = 600.0
    log_path: Path | None = None
    continuous_batching: bool = True
    kv_cache_tokens: int = 65_536
    threads: int | None = None
    max_batch: int = 16
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    @property
    def server_name(self) -> str:
        return "transformers serve" if self.server == "transformers" else "the evoharness engine server"


def serve_command(model_dir: str | Path, host: str, port: int, settings: ServeSettings) -> list[str]:
    """The server's command line, run by this interpreter (the same environment)."""
    if settings.server == "evoharness":
        return [sys.executable, "-m", "evoharness.engine_server", str(model_dir), "--host", host, "--port", str(port),
                "--device", settings.device, "--max-batch", str(settings.max_batch), *settings.extra_args]
    return [sys.executable, "-m", "transformers.cli.transformers", "serve", str(model_dir), "--host", host,
            "--port", str(port), "--device", settings.device, "--log-level", "warning",
            *(["--continuous-batching", "--cb-num-blocks", str(-(-settings.kv_cache_tokens // CB_PAGE_TOKENS))]
              if settings.continuous_batching else []), *settings.extra_args]


def serve_env(settings: ServeSettings) -> dict[str, str]:
    """The child's environment: offline (a local folder needs no hub), no update check on start, its threads."""
    threads = {} if settings.threads is None else {"OMP_NUM_THREADS": str(settings.threads)}
    return os.environ | {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1", "PYTHONUNBUFFERED": "1"} | threads


class ServedModel:
    """A model folder served while the context is open (or between start and stop), by ``settings.server``."""

    def __init__(self, model_dir: str | Path, settings: ServeSettings | None = None) -> None:
        self.model_dir = Path(model_dir).resolve()
        self.settings = settings or ServeSettings()
        self.port = self.settings.port or free_port(self.settings.host)
        self.log_path = self.settings.log_path or self.model_dir.parent / "serve.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def model(self) -> str:
        """The model name requests use (``/v1/models`` lists the preloaded folder by its path)."""
        return str(self.model_dir)

    @property
    def root_url(self) -> str:
        return f"http://{self.settings.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible endpoint (a teacher's ``--base-url``)."""
        return f"{self.root_url}/v1"

    def start(self) -> Self:
        """Start the child and wait until /health answers; :class:`ServingError` when it cannot."""
        if not (self.model_dir / "config.json").exists():
            raise ServingError(f"{self.model_dir} holds no model (no config.json): pass a model version's model "
                               "folder (`evoharness models` lists them).")
        missing = missing_serve_modules(self.settings.server)
        if missing:
            raise ServingError(f"{self.settings.server_name} needs {', '.join(missing)}, which is not installed: "
                               "pip install 'evoharness[serve]'")
        if port_in_use(self.settings.host, self.port):  # /health would answer from that server, not ours
            raise ServingError(f"port {self.port} on {self.settings.host} is in use (another server, perhaps one "
                               "left running): stop it or pass another --port.")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                serve_command(self.model_dir, self.settings.host, self.port, self.settings),
                env=serve_env(self.settings),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.settings.startup_timeout_s
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise ServingError(f"{self.settings.server_name} exited with {self._process.returncode} before it "
                                   f"answered /health: {self._log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.root_url}/health", timeout=2.0) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        raise ServingError(f"{self.settings.server_name} did not answer {self.root_url}/health within "
                           f"{self.settings.startup_timeout_s:.0f}s (log: {self.log_path}); raise "
                           "ServeSettings.startup_timeout_s on a busy machine.")

    def _log_tail(self, lines: int = 5) -> str:
        try:
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-lines:]
        except OSError:
            return f"(no log at {self.log_path})"
        return " | ".join(tail) or "(empty log)"

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the child's process group (SIGTERM, then SIGKILL after ``grace_s``)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
