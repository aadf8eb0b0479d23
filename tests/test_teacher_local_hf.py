"""The local Hugging Face client: a tiny random Qwen3 and a locally trained tokenizer, no downloads."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from evoharness.collection import CollectionConfig, collect
from evoharness.teachers.clients.base import ContextTooLongError
from evoharness.teachers.clients.local_hf import LocalHFClient
from evoharness.teachers.registry import Provider, TeacherSpec
from evoharness.testing.teachers import write_registry
from warehouse import Warehouse

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("ALFWORLD_DATA", str(REPO.parent / "shared" / "alfworld"))
os.environ.setdefault("OMP_NUM_THREADS", "1")
ENGINE = os.environ.get("EVOHARNESS_TEST_ENGINE", "fast")
MESSAGES = [{"role": "system", "content": "You play a text game."}, {"role": "user", "content": "Task: take apple"}]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    from evoharness.testing.tiny_hf import build_tiny_qwen3

    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny_qwen3"))


def test_local_client_generates_and_counts_tokens(tiny_model: Path) -> None:
    client = LocalHFClient(str(tiny_model))
    completion = asyncio.run(client.complete(MESSAGES, max_tokens=8, temperature=None))
    assert completion.input_tokens and completion.input_tokens > 5
    assert 1 <= (completion.output_tokens or 0) <= 8
    again = asyncio.run(client.complete(MESSAGES, max_tokens=8, temperature=None))
    assert again.text == completion.text  # greedy decoding is deterministic
    with pytest.raises(ContextTooLongError):
        asyncio.run(client.complete([{"role": "user", "content": "apple " * 3000}], max_tokens=8, temperature=None))


def test_local_teacher_collects_an_episode(tiny_model: Path, tmp_path: Path) -> None:
    spec = TeacherSpec(name="tiny-local", provider=Provider.LOCAL_HF, model=str(tiny_model), price_in=0.0,
                       price_out=0.0, max_concurrency=2, max_tokens=8)
    registry = write_registry(tmp_path / "teachers.yaml", spec)
    config = CollectionConfig(teacher="tiny-local", split="valid_seen", limit=2, max_steps=3, engine=ENGINE,
                              teachers_file=str(registry))
    with Warehouse(tmp_path / "wh.duckdb") as wh:
        result = collect(config, wh, run_id="local")
        rows = wh.con.execute("SELECT status, n_steps, input_tokens, output_tokens, cost_usd FROM episodes").fetchall()
    assert result.written == 2 and result.concurrency == 2
    for status, n_steps, input_tokens, output_tokens, cost in rows:
        assert status == "finished" and n_steps == 3  # an untrained model's turns are invalid, not crashes
        assert input_tokens > 0 and output_tokens > 0 and cost == 0.0
