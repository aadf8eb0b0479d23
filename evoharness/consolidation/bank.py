"""Experience bank versions as warehouse data: seed, load, freeze, and write a new version with its edits."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

from evoharness.consolidation.evolution import Edit
from evoharness.consolidation.store import insert_rows
from evoharness.envs.alfworld import SEED_BANK
from evoharness.harness.experience import ExperienceBankData
from evoharness.lineage import code_version
from warehouse import Warehouse


def bank_sha(bank: ExperienceBankData) -> str:
    return hashlib.sha256(bank.model_dump_json().encode()).hexdigest()


def _store_version(wh: Warehouse, bank: ExperienceBankData, parent: int | None, sources: list[str],
                   consolidation_run_id: str | None) -> None:
    insert_rows(wh, "experience_banks", [{
        "bank_id": bank.bank_id, "version": bank.version, "parent_version": parent, "frozen": True,
        "n_entries": len(bank.entries), "entries_json": bank.model_dump(mode="json"), "sha256": bank_sha(bank),
        "source_episodes": sources, "consolidation_run_id": consolidation_run_id,
        "created_at": datetime.now(UTC), "code_version": code_version(),
    }])
    insert_rows(wh, "experience_bank_entries", [
        {"bank_id": bank.bank_id, "version": bank.version, "entry_id": e.entry_id, "category": e.category.value,
         "key": e.key, "text": e.text, "usage": e.usage}
        for e in bank.entries
    ])


def ensure_seed(wh: Warehouse, seed_path: Path = SEED_BANK) -> ExperienceBankData:
    """Store the seed bank file as its version (once); returns it."""
    import yaml

    seed = ExperienceBankData.model_validate(yaml.safe_load(seed_path.read_text()))
    exists = wh.value("bank_version_count", bank_id=seed.bank_id, version=seed.version)
    if not exists:
        with wh.transaction():
            _store_version(wh, seed, None, [], None)
    return seed


def load_bank(wh: Warehouse, bank_id: str, version: int | None = None) -> ExperienceBankData:
    """A frozen version (``None``: the latest)."""
    row = wh.one("bank_frozen_entries", bank_id=bank_id, version=version)
    if row is None:
        raise KeyError(f"No frozen version {version if version is not None else '(latest)'} of bank {bank_id!r}.")
    return ExperienceBankData.model_validate(json.loads(row[0]))


def contributed_episodes(wh: Warehouse, bank_id: str) -> set[str]:
    """Episodes already induced into some version of ``bank_id`` (each episode contributes once)."""
    _, rows = wh.query("bank_contributed_episodes", bank_id=bank_id)
    return {row[0] for row in rows}


def write_version(wh: Warehouse, new: ExperienceBankData, parent: ExperienceBankData, edits: list[Edit],
                  sources: list[str], consolidator: str, consolidation_run_id: str) -> None:
    """Store ``new`` (frozen) and the edits that produced it; call inside ``wh.transaction()`` (consolidation
    commits a batch's examples and the version they induced together)."""
    now = datetime.now(UTC)
    _store_version(wh, new, parent.version, sources, consolidation_run_id)
    insert_rows(wh, "experience_edits", [
        edit.row() | {"bank_id": new.bank_id, "version": new.version, "edit_index": i,
                        "consolidator": consolidator, "consolidation_run_id": consolidation_run_id,
                        "created_at": now}
        for i, edit in enumerate(edits)
    ])
