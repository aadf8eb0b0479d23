"""A local Hugging Face causal LM behind the :class:`ChatClient` interface (students, small teachers).

Loads from a local folder only (``local_files_only``); generation runs in a worker thread, one call at
a time per model, so the event loop keeps serving other episodes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from evoharness.teachers.clients.base import Completion, ContextTooLongError


class LocalHFClient:
    """``model_path`` is a folder holding a transformers model and its tokenizer (with a chat template)."""

    def __init__(self, model_path: str, device: str = "cpu", seed: int = 0) -> None:
        self.model_path, self.device, self.seed = model_path, device, seed
        self._lock = threading.Lock()
        self._loaded: tuple[Any, Any] | None = None

    def _load(self) -> tuple[Any, Any]:
        if self._loaded is None:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.model_path, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(self.model_path, local_files_only=True)
            model = model.to(self.device)  # type: ignore[arg-type]
            model.eval()
            self._loaded = (model, tokenizer)
        return self._loaded

    def _generate(self, messages: list[dict[str, str]], max_tokens: int, temperature: float | None) -> Completion:
        import torch

        with self._lock:
            started = time.perf_counter()
            model, tokenizer = self._load()
            inputs = tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            ).to(self.device)
            n_in = int(inputs["input_ids"].shape[1])
            limit = getattr(model.config, "max_position_embeddings", None)
            if limit is not None and n_in + max_tokens > limit:
                raise ContextTooLongError(f"context too long: {n_in} prompt tokens + {max_tokens} > {limit}")
            sample = bool(temperature)
            torch.manual_seed(self.seed)
            with torch.no_grad():
                out = model.generate(
                    **inputs, max_new_tokens=max_tokens, do_sample=sample,
                    temperature=temperature if sample else None, top_p=None, top_k=None,
                    pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
                )
            new = out[0, n_in:]
            n_out = int(new.shape[0])
            eos = tokenizer.eos_token_id
            stop = "stop" if n_out and eos is not None and int(new[-1]) == eos else "length"
            return Completion(
                text=tokenizer.decode(new, skip_special_tokens=True),
                input_tokens=n_in, output_tokens=n_out,
                latency_ms=(time.perf_counter() - started) * 1000, model=self.model_path, stop_reason=stop,
            )

    async def aclose(self) -> None:
        """Nothing to close: the model stays loaded for the next run."""

    async def complete(
        self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float | None
    ) -> Completion:
        return await asyncio.to_thread(self._generate, messages, max_tokens, temperature)
