"""A local Hugging Face causal LM behind the :class:`ChatClient` interface (students, small teachers).

Loads from a local folder only (``local_files_only``). Concurrent episodes' turns are generated together
(:class:`~evoharness.teachers.clients.hf_batching.BatchGenerator`: one continuous batch for a Qwen3 model,
left-padded ``generate`` batches otherwise) in a worker thread, so the event loop keeps stepping the other
episodes' environments meanwhile.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, ClassVar

from evoharness.teachers.clients.base import Completion, ContextTooLongError
from evoharness.teachers.clients.constrained import ActionConstraint, ActionSpace
from evoharness.teachers.clients.hf_batching import BatchGenerator, Engine, Sampling


class LocalHFClient:
    """``model_path`` is a folder holding a transformers model and its tokenizer (with a chat template).
    ``engine`` None takes :attr:`default_engine` (``benchmarks/student_speed.py`` sets it to compare the paths)."""

    default_engine: ClassVar[Engine] = "continuous"

    def __init__(self, model_path: str, device: str = "cpu", seed: int = 0, max_batch: int = 16,
                 engine: Engine | None = None) -> None:
        self.model_path, self.device, self.seed, self.max_batch = model_path, device, seed, max_batch
        self.engine: Engine = engine or self.default_engine
        self._lock = threading.Lock()
        self._generator: BatchGenerator | None = None

    def _load(self) -> BatchGenerator:
        with self._lock:
            if self._generator is None:
                from transformers import AutoModelForCausalLM, AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(self.model_path, local_files_only=True)
                model = AutoModelForCausalLM.from_pretrained(self.model_path, local_files_only=True)
                model = model.to(self.device)  # type: ignore[arg-type]
                model.eval()
                self._generator = BatchGenerator(model, tokenizer, max_batch=self.max_batch, seed=self.seed,
                                                 engine=self.engine)
            return self._generator

    async def complete(
        self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float | None,
        action_space: ActionSpace | None = None,
    ) -> Completion:
        """One turn; with ``action_space`` the action is decoded constrained (:mod:`.constrained`)."""
        started = time.perf_counter()
        generator = self._generator if self._generator is not None else await asyncio.to_thread(self._load)
        tokenizer: Any = generator.tokenizer
        prompt_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                   return_dict=True)["input_ids"]
        limit = getattr(generator.model.config, "max_position_embeddings", None)
        if limit is not None and len(prompt_ids) + max_tokens > limit:
            raise ContextTooLongError(f"context too long: {len(prompt_ids)} prompt tokens + {max_tokens} > {limit}")
        constraint = ActionConstraint(tokenizer, action_space) if action_space is not None else None
        completion = await generator.generate(prompt_ids, Sampling(max_tokens, temperature or None), constraint)
        eos = tokenizer.eos_token_id
        return Completion(
            text=tokenizer.decode(completion, skip_special_tokens=True),
            input_tokens=len(prompt_ids), output_tokens=len(completion),
            latency_ms=(time.perf_counter() - started) * 1000, model=self.model_path,
            stop_reason="stop" if completion and eos is not None and completion[-1] == eos else "length",
        )

    async def aclose(self) -> None:
        """Nothing to close: the model stays loaded for the next run."""
