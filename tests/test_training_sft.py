"""SFT with TRL on a tiny Qwen3 student: prompt-completion data, learning, LoRA merge, model versions, Dagster."""

from __future__ import annotations

import asyncio
from pathlib import Path

import dagster as dg
import pytest

from evoharness.harness.grammar import parse_turn
from evoharness.teachers.clients.local_hf import LocalHFClient
from evoharness.training.model_versions import teacher_datasets
from evoharness.training.sft import prepare_splits, to_prompt_completion, train_sft
from evoharness.training.student_card import read_student_card
from evoharness.training.trainer_utils import LoraSettings
from tests.conftest import benchmark_module, tiny_sft_settings, train_sft_version
from warehouse import Warehouse

FAST = {"max_steps": 12, "logging_steps": 2, "max_length": 2048}


def test_examples_become_prompt_and_completion(curated: tuple[Path, str]) -> None:
    train, validation = prepare_splits(curated[1])
    assert set(train.column_names) == {"prompt", "completion", "turn_vars"} and validation is not None
    row = train[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert [m["role"] for m in row["completion"]] == ["assistant"]
    assert parse_turn(row["completion"][0]["content"]).error is None
    with pytest.raises(ValueError, match="not the assistant"):
        to_prompt_completion({"messages": [{"role": "user", "content": "hi"}]})


def test_tiny_student_learns_and_plays(curated: tuple[Path, str], tmp_path: Path) -> None:
    logs: list[tuple[int, dict[str, float]]] = []
    result = train_sft(curated[1], tmp_path, tiny_sft_settings(**FAST),
                       on_log=lambda entry, step, _: logs.append((step, entry)))
    assert result.steps == 12 and [s for s, _ in result.loss_history] == [1, 2, 4, 6, 8, 10, 12]
    assert result.loss_history[-1][1] < result.loss_history[0][1] - 1.0  # a random init starts near ln(vocab)
    assert result.eval_loss is not None and result.eval_loss < result.loss_history[0][1]
    assert any("loss" in entry for _, entry in logs)  # progress reached the callback
    # the SFT benchmarks' rate spans the training steps' logs only, not the final evaluation logged after them
    timed = [(float(at), entry) for at, (_, entry) in enumerate(logs)]
    steps = [(at, entry["num_input_tokens_seen"]) for at, entry in timed if "loss" in entry]
    assert any("eval_loss" in entry and "num_input_tokens_seen" in entry for _, entry in timed[int(steps[-1][0]) + 1:])
    assert benchmark_module("sft_buckets").training_token_rate(timed) == round(
        (steps[-1][1] - steps[0][1]) / (steps[-1][0] - steps[0][0]), 1)
    template = (Path(result.model_dir) / "tokenizer_config.json").read_text() + "".join(
        p.read_text() for p in Path(result.model_dir).glob("*.jinja"))
    assert "<|im_start|>" in template and "enable_thinking" in template  # the official Qwen3 chat format
    meta = read_student_card(result.model_dir)
    assert meta["settings"]["base_model"] == "tiny" and meta["steps"] == 12

    # the trained folder is a model the local client can play with
    client = LocalHFClient(result.model_dir)
    completion = asyncio.run(client.complete(
        [{"role": "system", "content": "s"}, {"role": "user", "content": "Your task is to: put a mug in desk."}],
        max_tokens=16, temperature=None))
    assert completion.output_tokens and completion.output_tokens <= 16


def test_lora_adapters_are_merged_into_the_saved_model(curated: tuple[Path, str], tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    settings = tiny_sft_settings(lora=LoraSettings(r=4, alpha=8), max_steps=2, logging_steps=1,
                                        max_length=1024)
    result = train_sft(curated[1], tmp_path, settings)
    saved = AutoModelForCausalLM.from_pretrained(result.model_dir)
    assert not any("lora" in name for name, _ in saved.named_parameters())
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    assert sum(p.numel() for p in saved.parameters()) == sum(p.numel() for p in base.parameters())
    assert result.steps == 2


def test_padding_free_batches_train_as_padded_ones_and_refuse_what_they_cannot_truncate(
        curated: tuple[Path, str], tmp_path: Path) -> None:
    """``padding_free`` (one sequence per batch, positions restarting per example) gives the padded batches' first
    loss, since attention stays per example; an example past ``max_length`` is an error, not silently kept."""
    settings = {"max_steps": 1, "logging_steps": 1, "max_length": 2048, "attention": "sdpa"}
    padded = train_sft(curated[1], tmp_path / "padded", tiny_sft_settings(**settings))
    packed = train_sft(curated[1], tmp_path / "packed", tiny_sft_settings(**settings, padding_free=True))
    assert packed.loss_history[0][1] == pytest.approx(padded.loss_history[0][1], rel=1e-3)
    with pytest.raises(ValueError, match="over sft.max_length 64"):
        train_sft(curated[1], tmp_path / "short", tiny_sft_settings(**settings | {"max_length": 64},
                                                                   padding_free=True))


def test_model_version_is_recorded_and_reused(curated_db: Path, tmp_path: Path) -> None:
    db = curated_db
    settings = tiny_sft_settings(max_steps=2, logging_steps=1, max_length=1024)
    with Warehouse(db) as wh:
        first = train_sft_version(wh, teacher_datasets(wh, "expert")[0], settings, tmp_path, "r1")
        again = train_sft_version(wh, teacher_datasets(wh, "expert")[0], settings, tmp_path, "r2")
        other = train_sft_version(wh, teacher_datasets(wh, "expert")[0], settings.model_copy(update={"seed": 1}), tmp_path, "r3")
        rows = wh.con.execute("SELECT model_version, stage, dataset_id, steps, run_id FROM model_versions "
                              "ORDER BY created_at").fetchall()
    assert not first.reused and again.reused and not other.reused
    assert again.model_version == first.model_version != other.model_version
    assert again.row["loss_history"] == first.row["loss_history"] and again.row["settings"]["seed"] == 0
    assert [(r[0], r[1], r[3], r[4]) for r in rows] == [(first.model_version, "sft", 2, "r1"),
                                                         (other.model_version, "sft", 2, "r3")]
    with Warehouse(db) as wh, pytest.raises(LookupError, match="Unknown dataset 'nobody@v1'"):
        train_sft_version(wh, "nobody@v1", settings, tmp_path, "r4")


def test_dagster_sft_student(curated_db: Path, tmp_path: Path) -> None:
    import assets.training as at
    from pipelines.partitions import register_teachers
    from pipelines.resources import StudentResource, TrainingLauncher, WarehouseResource

    instance = dg.DagsterInstance.ephemeral()
    register_teachers(instance)
    run_config = {"ops": {"sft_student": {"config": {"max_steps": 4, "max_length": 1024}}}}
    resources = {"warehouse": WarehouseResource(path=str(curated_db)),
                 "students": StudentResource(recipe="tiny", models_dir=str(tmp_path)),
                 "training": TrainingLauncher(), "pipes_client": dg.PipesSubprocessClient()}
    with pytest.raises(dg.Failure, match="No dataset_id for partition 'expert': materialize sft_dataset"):
        dg.materialize([at.sft_student], instance=instance, partition_key="expert", run_config=run_config,
                       resources=resources)  # no upstream materialization and no id given: never "the newest"
    run_config["ops"]["sft_student"]["config"]["dataset_id"] = "sft-expert@v1"
    result = dg.materialize([at.sft_student], instance=instance, partition_key="expert", run_config=run_config,
                            resources=resources)
    assert result.success
    metadata = result.get_asset_materialization_events()[0].materialization.metadata
    assert metadata["steps"].value == 4 and metadata["model_version"].value.startswith("expert-sft-")
    assert metadata["dataset_id"].value == "sft-expert@v1" and metadata["teacher"].value == "expert"
    assert "data:image/png;base64," in metadata["loss_curve"].value
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {"sft_student_learned": True}
    assert Path(metadata["path"].value, "config.json").exists()


def test_max_tokens_sets_the_steps_from_the_datasets_tokens_per_example(curated: tuple[Path, str],
                                                                        tmp_path: Path) -> None:
    settings = tiny_sft_settings(max_tokens=6_000, batch_size=4, per_device_batch_size=4, logging_steps=1,
                                        max_length=1024)
    result = train_sft(curated[1], tmp_path, settings)
    train, _ = prepare_splits(curated[1], settings.prompt_set)
    per_step = result.tokens_seen / result.steps
    assert 1 < result.steps < len(train) / 4  # far fewer than the epochs would take
    assert abs(result.tokens_seen - 6_000) <= per_step  # within one step of the budget


def test_an_edited_template_is_rendered_again_not_taken_from_the_map_cache(curated: tuple[Path, str], tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from evoharness.harness.prompts import load_prompt_set, prompts_dir

    prompts = Path(shutil.copytree(prompts_dir(), tmp_path / "prompts"))
    monkeypatch.setenv("EVOHARNESS_PROMPTS", str(prompts))
    system = prompts / "alfworld" / "bpe_student.system.j2"
    firsts = []
    for text in ("First system text.", "Second system text."):
        system.write_text(text)
        load_prompt_set.cache_clear()
        train, _ = prepare_splits(curated[1], "alfworld/bpe_student")
        firsts.append(train[0]["prompt"][0]["content"])
    load_prompt_set.cache_clear()
    assert firsts == ["First system text.", "Second system text."]


def test_decision_metrics_are_logged_at_every_evaluation(curated: tuple[Path, str], tmp_path: Path) -> None:
    settings = tiny_sft_settings(max_steps=2, logging_steps=1, max_length=1024, decision_turns=6,
                                        prompt_set="alfworld/bpe_compact")
    result = train_sft(curated[1], tmp_path, settings)
    assert result.decision_history, "no decision metrics were computed"
    final = result.decision_history[-1]
    assert final["step"] == result.steps and final["decision/turns"] == 6
    for key in ("action", "kind", "verb"):
        assert 0.0 <= final[f"decision/{key}_accuracy"] <= 1.0
    assert final["decision/invalid_rate"] == 0.0  # decoded constrained: every turn parses
    assert result.tokens_seen and result.tokens_seen > 0


def test_processes_building_the_same_base_end_with_one_whole_folder(tmp_path: Path) -> None:
    """Every process of an `accelerate launch` builds the tiny base at once: each in its own folder, one rename
    wins, and every process gets the same complete base (no half-written folder, no leftovers)."""
    from concurrent.futures import ThreadPoolExecutor

    from transformers import AutoModelForCausalLM

    from evoharness.training.sft import _base_model

    train = [{"prompt": [{"role": "user", "content": f"task {i}: put a mug on the shelf"}],
              "completion": [{"role": "assistant", "content": f"go to shelf {i}"}]} for i in range(20)]
    folder = tmp_path / "base"
    with ThreadPoolExecutor(3) as pool:
        built = list(pool.map(lambda _: _base_model(tiny_sft_settings(), train, folder), range(3)))
    assert built == [str(folder)] * 3
    assert [p.name for p in tmp_path.iterdir()] == ["base"]
    assert AutoModelForCausalLM.from_pretrained(folder).num_parameters() > 0


def test_a_checkpoint_cut_short_by_a_kill_is_not_resumed_from(tmp_path: Path) -> None:
    """A kill while the Trainer saves leaves ``trainer_state.json`` absent, or empty when it lands between opening
    and writing the file: resuming picks the newest checkpoint whose state was written whole."""
    from evoharness.training.trainer_utils import newest_checkpoint

    for step, state in [(2, '{"global_step": 2}'), (4, '{"global_step": 4}'), (6, ""), (8, None)]:
        (tmp_path / f"checkpoint-{step}").mkdir()
        if state is not None:
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(state)
    assert newest_checkpoint(tmp_path) == str(tmp_path / "checkpoint-4")
    assert newest_checkpoint(tmp_path / "absent") is None


def test_a_run_killed_after_its_last_checkpoint_is_finished_from_it_without_another_step(
        curated: tuple[Path, str], tmp_path: Path) -> None:
    """The final checkpoint is written before the model folder: a rerun after a kill between the two loads it
    (the Trainer, resumed there, would train one step past ``max_steps``)."""
    import shutil

    import torch
    from safetensors.torch import load_file

    settings = tiny_sft_settings(max_steps=4, logging_steps=1, save_steps=2)
    first = train_sft(curated[1], tmp_path, settings)
    weights = load_file(Path(first.model_dir) / "model.safetensors")
    shutil.rmtree(first.model_dir)
    again = train_sft(curated[1], tmp_path, settings)
    assert (first.steps, again.steps) == (4, 4) and again.tokens_seen == first.tokens_seen
    assert again.loss_history == first.loss_history
    resumed = load_file(Path(again.model_dir) / "model.safetensors")
    assert all(torch.equal(weights[name], resumed[name]) for name in weights)


@pytest.mark.parametrize(("batch", "per_device", "processes", "layout"),
                         [(16, 16, 1, (16, 1)), (16, 16, 2, (8, 1)), (16, 4, 2, (4, 2)), (16, 4, 1, (4, 4)),
                          (4, 8, 1, (4, 1))])
def test_batch_size_is_the_examples_per_optimizer_step_over_every_process(batch: int, per_device: int, processes: int,
                                                                          layout: tuple[int, int]) -> None:
    """`accelerate launch` with two processes trains the same batch_size per step as one process (before, each
    process took per_device_batch_size: twice the batch)."""
    settings = tiny_sft_settings(batch_size=batch, per_device_batch_size=per_device)
    per_step, accumulation = settings.batch_layout(processes)
    assert (per_step, accumulation) == layout and per_step * accumulation * processes == batch
    with pytest.raises(ValueError, match="split evenly"):
        tiny_sft_settings(batch_size=3, per_device_batch_size=1).batch_layout(2)
    with pytest.raises(ValueError, match="not a multiple"):
        tiny_sft_settings(batch_size=12, per_device_batch_size=8).batch_layout(1)
