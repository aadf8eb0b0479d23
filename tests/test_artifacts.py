"""Artefact folders are complete or absent: atomic saves with a manifest written last, verification before
use (a truncated or deleted file is a one-line error naming the folder), legacy folders without a manifest
judged by their structure, a kill while saving leaves no half folder, a rerun rebuilds a corrupt dataset."""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from evoharness.artifacts import (
    MANIFEST,
    atomic_folder,
    load_dataset_folder,
    partial_path,
    seal_artifact,
    verify_artifact,
)
from evoharness.errors import CorruptArtifactError, known_failure_line
from tests.conftest import subprocess_env


def write_files(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


def one_line_naming(exc: pytest.ExceptionInfo[CorruptArtifactError], folder: Path, *says: str) -> None:
    line = known_failure_line(exc.value)
    assert line is not None and "\n" not in line
    assert str(folder) in line and all(text in line for text in says), line
    assert "rerun" in line  # the fix


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny student saved by ``save_trained`` through a real transformers Trainer (nothing trained)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    from evoharness.training.student_card import CARD_FILE, write_student_card
    from evoharness.training.tiny_student import TinyStudentSpec, build_tiny_student
    from evoharness.training.trainer_utils import save_trained

    root = tmp_path_factory.mktemp("model")
    base = build_tiny_student(root / "base", ["go to the desk 1", "take the mug 1 from the desk 1"],
                              TinyStudentSpec(vocab_size=300))
    trainer = Trainer(model=AutoModelForCausalLM.from_pretrained(base),
                      args=TrainingArguments(output_dir=str(root / "checkpoints"), report_to=[]))
    model_dir = root / "out" / "model"
    save_trained(trainer, AutoTokenizer.from_pretrained(base), model_dir, merged_lora=False,
                 before_seal=lambda folder: write_student_card(folder, None, {"steps": 0}))
    assert CARD_FILE in json.loads((model_dir / MANIFEST).read_text())["files"]  # the card is sealed too
    assert not partial_path(model_dir).exists()
    return model_dir


def test_a_saved_model_verifies_and_a_damaged_one_names_its_folder(saved_model: Path, tmp_path: Path) -> None:
    assert verify_artifact(saved_model, "model", hash_limit_bytes=None) == saved_model

    truncated = Path(shutil.copytree(saved_model, tmp_path / "truncated"))
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(CorruptArtifactError) as cut:
        verify_artifact(truncated, "model")
    one_line_naming(cut, truncated, "model.safetensors has", "its manifest says")

    deleted = Path(shutil.copytree(saved_model, tmp_path / "deleted"))
    (deleted / "model.safetensors").unlink()
    with pytest.raises(CorruptArtifactError) as gone:
        verify_artifact(deleted, "model")
    one_line_naming(gone, deleted, "model.safetensors is missing")

    flipped = Path(shutil.copytree(saved_model, tmp_path / "flipped"))
    config = flipped / "config.json"
    text = config.read_text()
    config.write_text(text.replace("Qwen3", "Qwen4", 1))  # same size, other content
    assert len(config.read_text()) == len(text)
    with pytest.raises(CorruptArtifactError) as changed:
        verify_artifact(flipped, "model")
    one_line_naming(changed, flipped, "config.json differs from its manifest")


def test_without_a_manifest_a_folder_is_judged_by_its_structure(saved_model: Path, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    legacy = Path(shutil.copytree(saved_model, tmp_path / "legacy"))
    (legacy / MANIFEST).unlink()
    with caplog.at_level(logging.WARNING, logger="evoharness.artifacts"):
        assert verify_artifact(legacy, "model") == legacy  # written before manifests existed: accepted
    assert f"model folder {legacy} has no {MANIFEST}" in caplog.text

    (legacy / "model.safetensors").unlink()
    with pytest.raises(CorruptArtifactError) as incomplete:
        verify_artifact(legacy, "model")
    one_line_naming(incomplete, legacy, f"no {MANIFEST} and model.safetensors is missing")
    with pytest.raises(CorruptArtifactError):
        seal_artifact(legacy, "model")  # an incomplete folder is never sealed
    assert not (legacy / MANIFEST).exists()

    dataset = tmp_path / "dataset"
    state = {"_data_files": [{"filename": "data-0.arrow"}]}
    write_files(dataset, {"dataset_dict.json": b'{"splits": ["train"]}',
                          "train/state.json": json.dumps(state).encode()})
    with pytest.raises(CorruptArtifactError) as no_data:
        verify_artifact(dataset, "dataset")
    one_line_naming(no_data, dataset, "train/data-0.arrow is missing")
    write_files(dataset, {"train/data-0.arrow": b"rows"})
    seal_artifact(dataset, "dataset")
    assert verify_artifact(dataset, "dataset") == dataset
    assert set(json.loads((dataset / MANIFEST).read_text())["files"]) == {
        "dataset_dict.json", "train/state.json", "train/data-0.arrow"}


def test_a_save_that_raises_leaves_no_half_folder_and_keeps_the_old_one(tmp_path: Path) -> None:
    path = tmp_path / "datasets" / "sft" / "v1"
    with pytest.raises(RuntimeError, match="disk full"), atomic_folder(path, "dataset") as folder:
        write_files(folder, {"a.bin": b"x" * 1000})
        raise RuntimeError("disk full")
    assert not path.exists() and not partial_path(path).exists()

    with atomic_folder(path, "dataset") as folder:
        write_files(folder, {"a.bin": b"old"})
    with pytest.raises(RuntimeError), atomic_folder(path, "dataset") as folder:
        write_files(folder, {"a.bin": b"new but unfinished"})
        raise RuntimeError("killed")
    assert (path / "a.bin").read_bytes() == b"old" and verify_artifact(path, "dataset") == path

    with atomic_folder(path, "dataset") as folder:  # a finished save replaces the old folder whole
        write_files(folder, {"b.bin": b"new"})
    assert sorted(p.name for p in path.iterdir()) == [MANIFEST, "b.bin"]
    assert [p.name for p in path.parent.iterdir()] == ["v1"]  # nothing partial or moved-aside is left


SLOW_SAVE = """
import sys, time
from pathlib import Path
from evoharness.artifacts import atomic_folder
with atomic_folder(Path(sys.argv[1]), "model") as folder:
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"w" * 100_000)
    print("writing", flush=True)
    time.sleep(120)
"""


def test_a_kill_while_saving_leaves_no_folder_and_the_next_save_cleans_up(tmp_path: Path) -> None:
    path = tmp_path / "models" / "v" / "model"
    child = subprocess.Popen([sys.executable, "-c", SLOW_SAVE, str(path)], env=subprocess_env(),
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "writing"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert not path.exists() and (partial_path(path) / "model.safetensors").exists()
    with pytest.raises(CorruptArtifactError) as missing:
        verify_artifact(path, "model")
    one_line_naming(missing, path, "the folder is missing")

    with atomic_folder(path, "model") as folder:
        write_files(folder, {"config.json": b"{}", "model.safetensors": b"w" * 10})
    assert verify_artifact(path, "model") == path and not partial_path(path).exists()


def test_a_rerun_rebuilds_a_corrupt_dataset_in_place(curated_db: Path, tmp_path: Path) -> None:
    from evoharness.curation.build import curate
    from evoharness.curation.config import CurationConfig
    from warehouse import Warehouse

    config = CurationConfig(name="rebuilt", output_dir=str(tmp_path / "datasets"))
    with Warehouse(curated_db) as wh:
        first = curate(wh, config, "first")
        arrow = next(Path(first.path).glob("train/*.arrow"))
        arrow.write_bytes(arrow.read_bytes()[: arrow.stat().st_size // 2])  # as if killed while writing
        with pytest.raises(CorruptArtifactError) as cut:
            load_dataset_folder(first.path)
        one_line_naming(cut, Path(first.path), f"train/{arrow.name} has")
        again = curate(wh, config, "again")
        versions = wh.scalar("SELECT count(*) FROM datasets WHERE name = 'rebuilt'")
    assert (again.dataset_id, again.path, again.reused) == (first.dataset_id, first.path, False)
    assert versions == 1  # the same dataset, rebuilt: not a new version
    assert len(load_dataset_folder(again.path)["train"]) == first.n_train
    with Warehouse(curated_db) as wh:
        assert curate(wh, config, "third").reused
