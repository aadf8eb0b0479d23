"""A real HTTP server on 127.0.0.1 that speaks the Anthropic Messages and OpenAI Chat Completions wire
formats, answering from a scripted ``responder`` with optional fault injection.

    with LoopbackServer(responder) as server:
        client = openai.AsyncOpenAI(base_url=server.openai_base_url, api_key="x")

``responder(call) -> Reply`` runs in the server's request thread (one thread per connection). Faults
are part of the reply: an error ``status`` (with ``headers`` such as ``retry-after``), ``delay_s`` (slow
answers, client timeouts), ``truncate`` (the body is cut off mid-way; Content-Length promises more),
``reset`` (the connection is reset before any answer), ``body`` (a raw body, e.g. malformed JSON).
"""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Self

logger = logging.getLogger(__name__)
Api = Literal["openai", "anthropic"]
ROUTES: dict[str, Api] = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic"}


@dataclass(frozen=True)
class Call:
    """One request as the server saw it. ``index`` counts requests from 0 in arrival order."""

    api: Api
    path: str
    body: dict[str, Any]
    headers: dict[str, str]  # lower-case names
    index: int
    received_at: float

    @property
    def messages(self) -> list[dict[str, str]]:
        """Chat messages with string contents; Anthropic's ``system`` comes first as a system message."""
        found: list[dict[str, str]] = []
        if self.api == "anthropic" and self.body.get("system"):
            found.append({"role": "system", "content": _text(self.body["system"])})
        found.extend({"role": m["role"], "content": _text(m["content"])} for m in self.body.get("messages", []))
        return found

    @property
    def prompt(self) -> str:
        """All message contents joined (what scripted players read)."""
        return "\n\n".join(m["content"] for m in self.messages)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content if isinstance(block, dict))


@dataclass(frozen=True)
class Reply:
    """What the server answers. ``stop_reason``: None (normal end), ``max_tokens``, ``refusal``."""

    text: str = ""
    status: int = 200
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    truncate: bool = False
    input_tokens: int | None = None
    output_tokens: int | None = None
    reset: bool = False
    stop_reason: str | None = None
    body: str | None = None
    error_code: str | None = None
    reasoning: str | None = None  # Chat Completions only: a thought split off into ``reasoning_content``


Responder = Callable[[Call], Reply]


def count_words(text: str) -> int:
    """A stand-in token count: whitespace-separated words."""
    return len(text.split())


def _usage(call: Call, reply: Reply) -> tuple[int, int]:
    n_in = reply.input_tokens if reply.input_tokens is not None else count_words(call.prompt)
    n_out = reply.output_tokens if reply.output_tokens is not None else max(1, count_words(reply.text))
    return n_in, n_out


def openai_body(call: Call, reply: Reply) -> dict[str, Any]:
    """A Chat Completions response (or error) body."""
    if reply.status != 200:
        kind = "rate_limit_error" if reply.status == 429 else "server_error" if reply.status >= 500 else "invalid_request_error"
        return {"error": {"message": reply.text or f"HTTP {reply.status}", "type": kind, "param": None,
                          "code": reply.error_code}}
    n_in, n_out = _usage(call, reply)
    refused = reply.stop_reason == "refusal"
    finish = {"max_tokens": "length", "refusal": "stop", "content_filter": "content_filter"}.get(
        reply.stop_reason or "", "stop")
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
        "model": call.body.get("model", "loopback"),
        "choices": [{"index": 0, "finish_reason": finish, "logprobs": None,
                     "message": {"role": "assistant", "content": None if refused else reply.text,
                                 "refusal": reply.text if refused else None}
                     | ({"reasoning_content": reply.reasoning} if reply.reasoning is not None else {})}],
        "usage": {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out},
    }


def anthropic_body(call: Call, reply: Reply) -> dict[str, Any]:
    """A Messages API response (or error) body."""
    if reply.status != 200:
        kind = {429: "rate_limit_error", 529: "overloaded_error", 401: "authentication_error"}.get(
            reply.status, "api_error" if reply.status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": reply.text or f"HTTP {reply.status}"}}
    n_in, n_out = _usage(call, reply)
    stop = {"max_tokens": "max_tokens", "refusal": "refusal", "content_filter": "refusal"}.get(
        reply.stop_reason or "", "end_turn")
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
        "model": call.body.get("model", "loopback"),
        "content": [{"type": "text", "text": reply.text}] if reply.text else [],
        "stop_reason": stop, "stop_sequence": None,
        "usage": {"input_tokens": n_in, "output_tokens": n_out},
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes; no 40 ms delayed-ACK stalls
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("loopback: " + format, *args)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        api = ROUTES.get(self.path.split("?", 1)[0])
        if api is None:
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._send(400, {"error": {"message": "request body is not JSON"}})
            return
        headers = {key.lower(): value for key, value in self.headers.items()}
        call = self.server.owner._record(api, self.path, body, headers)
        try:
            reply = self.server.owner.responder(call)
        except Exception as exc:  # a responder bug: answer 500 and keep it for the test to see
            self.server.owner.errors.append(exc)
            logger.exception("loopback responder failed")
            self._send(500, {"error": {"message": f"responder failed: {type(exc).__name__}"}})
            return
        if reply.delay_s > 0:
            time.sleep(reply.delay_s)
        if reply.reset:
            self._reset()
            return
        payload = (reply.body if reply.body is not None else
                   json.dumps(openai_body(call, reply) if api == "openai" else anthropic_body(call, reply)))
        self._send(reply.status, payload, reply.headers, reply.truncate)

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None, truncate: bool = False) -> None:
        data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            if truncate:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data[: len(data) // 2] if truncate else data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError) as exc:  # the client gave up (its timeout)
            logger.debug("loopback: client went away: %r", exc)
            self.close_connection = True
            return
        if truncate:
            self.close_connection = True

    def _reset(self) -> None:
        """Close with a TCP RST (SO_LINGER 0) before answering."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256  # the stdlib's 5 resets bursts of new connections
    owner: LoopbackServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver calls this inside its except block, so the exception is current here
        logger.debug("loopback: error while serving %s", client_address, exc_info=True)  # noqa: LOG014


class LoopbackServer:
    """A context manager that serves ``responder`` on a free port of 127.0.0.1 in a background thread."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.calls: list[Call] = []
        self.errors: list[Exception] = []
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def _record(self, api: Api, path: str, body: dict[str, Any], headers: dict[str, str]) -> Call:
        with self._lock:
            call = Call(api=api, path=path, body=body, headers=headers, index=len(self.calls),
                        received_at=time.monotonic())
            self.calls.append(call)
        return call

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the loopback server is not running")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.base_url

    def start(self) -> LoopbackServer:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="loopback-llm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
