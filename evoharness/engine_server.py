"""An OpenAI-compatible server over this package's own decoding engine, with structured outputs: the CPU stand-in
for ``vllm serve`` (``evoharness serve --server evoharness``).

``transformers serve`` ignores structured outputs, so a student served by it decodes unconstrained and plays as a
weaker policy than the same weights played locally (docs/results.md, "When a teacher ships"). This server answers
``POST /v1/chat/completions`` with the engine local play uses (:class:`~.teachers.clients.hf_batching.
BatchGenerator`: one continuous batch over the requests in flight, the shared prompt prefix cached) and holds a
completion to the grammar a request carries, in vLLM's field (``structured_outputs.grammar``), older vLLM's
(``guided_grammar``) or SGLang's (``ebnf``), compiled by xgrammar. The chat template renders the prompt as local
play renders it, so a served student given its turn grammar decodes what it decodes locally.

Greedy unless the request sets a ``temperature`` above 0 (then ``top_p`` applies; ``seed`` is the server's, set at
start). No streaming, one choice (``n`` 1). ``GET /health`` and ``GET /v1/models`` answer as ``transformers serve``'s.

    python -m evoharness.engine_server MODEL_DIR --port 8000 [--max-batch 16] [--seed 0]
"""

import argparse
import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from evoharness.teachers.clients.grammar_constraint import GrammarCompilers, GrammarConstraint, GrammarError
from evoharness.teachers.clients.hf_batching import BatchGenerator, Sampling

GRAMMAR_FIELDS = ("structured_outputs.grammar", "guided_grammar", "ebnf")
"""Where a request's grammar is read from, first found first."""


class RequestError(ValueError):
    """A request this server cannot answer as asked (HTTP 400); the message says what to change."""


def request_grammar(body: dict[str, Any]) -> str | None:
    """The EBNF grammar the request holds its completion to, from whichever of :data:`GRAMMAR_FIELDS` it set."""
    structured = body.get("structured_outputs") or {}
    if not isinstance(structured, dict):
        raise RequestError("structured_outputs must be an object")
    unsupported = sorted(set(structured) - {"grammar"})
    if unsupported:
        raise RequestError(f"structured_outputs {', '.join(unsupported)} is not supported here: only grammar")
    grammar = structured.get("grammar") or body.get("guided_grammar") or body.get("ebnf")
    if grammar is not None and not isinstance(grammar, str):
        raise RequestError("a grammar must be a string (EBNF)")
    return grammar


def request_sampling(body: dict[str, Any]) -> Sampling:
    """How the request decodes: its token limit, and greedy unless its temperature is above 0."""
    if body.get("stream"):
        raise RequestError("stream is not supported here: ask without stream")
    if body.get("n", 1) != 1:
        raise RequestError("n must be 1 here")
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if not isinstance(limit, int) or limit < 1:
        raise RequestError("set max_tokens (or max_completion_tokens) to a positive integer")
    temperature = body.get("temperature")
    top_p = body.get("top_p")
    return Sampling(limit, float(temperature) if temperature else None, float(top_p) if top_p is not None else 1.0)


class EngineServer:
    """A model folder's completions for chat requests, decoded by :class:`BatchGenerator`."""

    def __init__(self, model_dir: str | Path, device: str = "cpu", max_batch: int = 16, seed: int = 0) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_name = str(Path(model_dir).resolve())
        self.tokenizer: Any = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).to(device)  # type: ignore[arg-type]
        model.eval()
        self.limit: int | None = getattr(model.config, "max_position_embeddings", None)
        self.generator = BatchGenerator(model, self.tokenizer, max_batch=max_batch, seed=seed)
        self.grammars = GrammarCompilers(self.tokenizer, model.config.vocab_size)

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat completion object answering ``body`` (an OpenAI chat completions request)."""
        if body.get("model") not in (None, self.model_name):
            raise RequestError(f"model {body.get('model')!r} is not served here; this server serves "
                               f"{self.model_name!r}")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("messages must be a non-empty list")
        sampling = request_sampling(body)
        grammar = request_grammar(body)
        prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                    return_dict=True)["input_ids"]
        if self.limit is not None and len(prompt) + sampling.max_new_tokens > self.limit:
            raise RequestError(f"context too long: {len(prompt)} prompt tokens + {sampling.max_new_tokens} > "
                               f"{self.limit}")
        constraint: GrammarConstraint | None = None
        if grammar is not None:
            try:
                constraint = await asyncio.to_thread(self.grammars.constraint, grammar)
            except GrammarError as exc:
                raise RequestError(str(exc)) from None
        completion = await self.generator.generate(prompt, sampling, constraint)
        ended = bool(completion) and completion[-1] == self.tokenizer.eos_token_id
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": self.model_name,
            "choices": [{"index": 0, "finish_reason": "stop" if ended else "length",
                         "message": {"role": "assistant",
                                     "content": self.tokenizer.decode(completion, skip_special_tokens=True)}}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(completion),
                      "total_tokens": len(prompt) + len(completion)},
        }


def create_app(server: EngineServer) -> Any:
    """The FastAPI app: ``/health``, ``/v1/models`` and ``/v1/chat/completions`` over ``server``."""
    # FastAPI reads the handlers' annotations at run time: this module has no `from __future__ import annotations`
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI(title="evoharness engine server")

    def error(status: int, message: str, kind: str) -> JSONResponse:
        return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind, "code": None}})

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": server.model_name, "object": "model", "owned_by": "evoharness"}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        try:
            body = await request.json()
        except ValueError:
            return error(400, "the request body is not JSON", "invalid_request_error")
        if not isinstance(body, dict):
            return error(400, "the request body must be a JSON object", "invalid_request_error")
        try:
            return await server.complete(body)
        except RequestError as exc:
            return error(400, str(exc), "invalid_request_error")

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", help="a model folder (config.json, weights, tokenizer with a chat template)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-batch", type=int, default=16, help="completions decoded together")
    parser.add_argument("--seed", type=int, default=0, help="the sampler's seed (sampled requests only)")
    args = parser.parse_args(argv)
    import uvicorn

    server = EngineServer(args.model_dir, device=args.device, max_batch=args.max_batch, seed=args.seed)
    uvicorn.run(create_app(server), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
