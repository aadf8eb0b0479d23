"""A relabelled dataset (DAgger's aggregate): a curated dataset plus the states a student reached, each with
the turn the expert would have played there (:mod:`evoharness.training.relabel` collects them).

Its own dataset kind: named ``<base name>.relabel``, its ``config`` names the base dataset and the model
version that played, and ``dataset_examples`` names every labelled turn (``consolidator = 'expert-labels'``,
the run that collected it in ``consolidation_run_id``). The base dataset's examples are kept as they are, and
its game split too: labelled turns of a base validation game are left out, so the validation loss of the
relabelled student is measured on the same turns as its parent's. The labelled turns are rendered with the
teacher's prompt set from their stored template variables (training re-renders them like every example).
"""

from __future__ import annotations

import json
from collections import Counter

import polars as pl

from evoharness.curation.build import DatasetResult, record_dataset, split_games
from evoharness.curation.config import CurationConfig
from evoharness.curation.guard import assert_train_only
from evoharness.errors import MissingInputError, UnknownDatasetError
from evoharness.harness.grammar import parse_turn
from evoharness.harness.prompts import load_prompt_set
from warehouse import Warehouse, load_query

LABEL_CONSOLIDATOR = "expert-labels"
TEACHER_PROMPT_SET = "alfworld/bpe"


def _labelled_rows(labels: pl.DataFrame, base_split: dict[str, str], validation_fraction: float,
                   bank_version: int) -> tuple[list[dict], Counter[str]]:
    """Training rows of the labelled turns (same columns as the base rows), and what was left out, by reason."""
    prompt_set = load_prompt_set(TEACHER_PROMPT_SET)
    new_games = set(labels["game_id"].to_list()) - set(base_split)
    split = base_split | split_games(new_games, validation_fraction)
    rows, dropped, seen = [], Counter[str](), set()
    for row in labels.iter_rows(named=True):
        if split[row["game_id"]] != "train":
            dropped["labelled turns of validation games"] += 1
            continue
        turn_vars = json.loads(row["turn_vars"])
        rendered = prompt_set.render({"max_steps": turn_vars["max_steps"]}, turn_vars)
        if (rendered.user, row["label"]) in seen:
            dropped["duplicate labelled turns"] += 1
            continue
        seen.add((rendered.user, row["label"]))
        messages = [*rendered.messages(), {"role": "assistant", "content": row["label"]}]
        rows.append({
            "episode_id": row["episode_id"], "turn": row["turn"], "kind": parse_turn(row["label"]).kind.value,
            "game_id": row["game_id"], "task_type": row["task_type"], "teacher": row["policy"],
            "consolidator": LABEL_CONSOLIDATOR, "source_mode": "relabel", "bank_version": bank_version, "consolidation_run_id": row["run_id"],
            "dataset_split": "train", "turn_vars": row["turn_vars"], "messages": messages,
            "estimated_tokens": float(sum(-(-len(m["content"].encode()) // 4) for m in messages)),
        })
    return rows, dropped


def curate_relabelled(wh: Warehouse, base_dataset_id: str, model_version: str, run_id: str,
                      output_dir: str | None = None) -> DatasetResult:
    """``base_dataset_id`` plus ``model_version``'s expert-labelled turns, as a new dataset (reused if identical)."""
    base = wh.one("dataset_name_config", dataset_id=base_dataset_id)
    if base is None:
        raise UnknownDatasetError(base_dataset_id)
    name, base_config, bank_version = base[0], CurationConfig.model_validate_json(base[1]), base[2]
    labels = wh.con.execute(load_query("relabelled_turns"), {"model_version": model_version}).pl()
    if labels.is_empty():
        raise MissingInputError(f"No expert-labelled turns of {model_version!r}: run `evoharness relabel` first.")
    assert_train_only(zip(labels["game_id"].to_list(), labels["catalog_split"].to_list(), strict=True))
    base_rows = wh.con.execute(load_query("dataset_training_rows"), {"dataset_id": base_dataset_id}).pl()
    if base_rows.is_empty():
        raise MissingInputError(f"Dataset {base_dataset_id!r} names no examples (curated before dataset_examples "
                          "existed): run `evoharness backfill-lineage` first.")
    base_split = dict(base_rows.select("game_id", "dataset_split").unique().iter_rows())
    rows, dropped = _labelled_rows(labels, base_split, base_config.validation_fraction, bank_version)
    labelled = pl.DataFrame(rows, schema=base_rows.schema)
    over = labelled["estimated_tokens"] > base_config.max_tokens
    if over.any():
        dropped["examples over max_tokens"] += int(over.sum())
    examples = pl.concat([base_rows, labelled.filter(~over)]).sort("episode_id", "turn")
    config = base_config.model_copy(update={"name": f"{name}.relabel", "output_dir": output_dir})
    episodes = examples.select("episode_id", "task_type", "source_mode").unique(maintain_order=True)
    provenance = {"base_dataset_id": base_dataset_id, "relabelled_by": model_version,
                  "labelled_turns": labels.height, "student_agreed_with_expert": int(labels["agreed"].sum())}
    return record_dataset(wh, config, run_id, examples, episodes, dict(dropped), provenance)
