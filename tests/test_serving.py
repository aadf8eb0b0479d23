"""``evoharness serve``'s lifecycle without a model: a busy port is refused before anything starts, and a kill
(SIGTERM) reaches the ``finally`` that stops the served child."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from evoharness.serving import ServedModel, ServeSettings, ServingError, port_in_use, stop_on_signals


def test_a_port_another_server_holds_is_refused_before_anything_starts(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        assert port_in_use("127.0.0.1", port)
        served = ServedModel(tmp_path, ServeSettings(port=port, log_path=tmp_path / "serve.log"))
        with pytest.raises(ServingError, match=f"port {port} on 127.0.0.1 is in use"):
            served.start()
        assert served._process is None and not (tmp_path / "serve.log").exists()
    assert not port_in_use("127.0.0.1", port)


def test_a_kill_runs_finally_blocks_like_ctrl_c() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    stopped = []
    try:
        stop_on_signals()
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler raises at once
            finally:
                stopped.append(True)
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    assert stopped == [True]
