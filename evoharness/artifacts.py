"""Artefact folders (a curated dataset, a trained model) that are either complete or absent.

Saving is atomic: the folder is written as a temporary sibling (``.<name>.partial``), a manifest with every
file's size and sha256 is written into it last, and only then is it renamed into place (an older folder at
that path is moved aside first and removed after). A kill while saving leaves the partial folder, never a
half folder at the path; the next save removes it.

:func:`verify_artifact` checks a folder against its manifest before use and raises
:class:`~evoharness.errors.CorruptArtifactError` naming the folder when the manifest is missing, or a file is
missing or differs in size or hash. Sizes are always checked; hashes of files up to ``hash_limit_bytes``
(default :data:`HASH_LIMIT_BYTES`), so verifying a multi-gigabyte model stays cheap: a cut-short or deleted
file is always caught, a same-size bit flip in a big file only with ``hash_limit_bytes=None``.

Folders without a manifest (legacy: written before manifests existed, or a trainer's checkpoint, which the trainer
saves itself) are accepted when their structure is complete: a dataset whose ``dataset_dict.json``, split
``state.json`` files and the data files they name exist; a model with ``config.json`` and its weights (a single
file, or every shard its index names). A legacy folder is logged as such once; :func:`seal_artifact` writes a
manifest for it. Missing structure is an error like any other.
Files added to a folder after its manifest (none are, by the savers here) are not checked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from evoharness.errors import CorruptArtifactError

ArtifactKind = Literal["dataset", "model"]
MANIFEST = "artifact_manifest.json"
MANIFEST_FORMAT = 1
HASH_LIMIT_BYTES = 256 * 2**20
"""Files above this size are verified by size only (their sha256 is still recorded), so a default verify
hashes for at most about a second per file on one core; a whole small student is fully hashed in well under
a second (``benchmarks/results/artifact_verify.json``: sha256 throughput, the cost for a 15 MB student). Pass
``hash_limit_bytes=None`` for a full check."""

log = logging.getLogger(__name__)
_warned_legacy: set[Path] = set()


def partial_path(path: str | Path) -> Path:
    """The temporary sibling a folder is written as before it is renamed into place."""
    path = Path(path)
    return path.with_name(f".{path.name}.partial")


def _old_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.old")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(4 * 2**20):
            digest.update(chunk)
    return digest.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(folder: str | Path, kind: ArtifactKind) -> Path:
    """Record every file of ``folder`` (size, sha256) in its manifest, written last and flushed to disk."""
    folder = Path(folder)
    files = {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": file_sha256(p)}
             for p in _files(folder)}
    manifest = folder / MANIFEST
    staged = folder / f".{MANIFEST}.tmp"
    with staged.open("w") as handle:
        json.dump({"format": MANIFEST_FORMAT, "kind": kind, "files": files}, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    staged.replace(manifest)
    return manifest


def seal_artifact(path: str | Path, kind: ArtifactKind) -> Path:
    """Write the manifest of an existing complete folder (e.g. a legacy one), after checking its structure."""
    path = Path(path)
    _check_legacy(path, kind)
    return write_manifest(path, kind)


def publish(partial: str | Path, path: str | Path, kind: ArtifactKind) -> Path:
    """Write ``partial``'s manifest, then rename it to ``path`` (replacing a folder there); returns it."""
    partial, path = Path(partial), Path(path)
    write_manifest(partial, kind)
    old = _old_path(path)
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        path.rename(old)
    partial.rename(path)
    shutil.rmtree(old, ignore_errors=True)
    return path


def discard_partial(path: str | Path) -> None:
    """Remove what a killed save left beside ``path`` (its partial or moved-aside folder)."""
    path = Path(path)
    for leftover in (partial_path(path), _old_path(path)):
        shutil.rmtree(leftover, ignore_errors=True)


@contextmanager
def atomic_folder(path: str | Path, kind: ArtifactKind) -> Iterator[Path]:
    """Yield an empty temporary folder to write ``path``'s files into; when the block ends normally the folder
    gets its manifest and is renamed to ``path``; when it raises, the temporary folder is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    discard_partial(path)
    partial = partial_path(path)
    partial.mkdir()
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    publish(partial, path, kind)


def read_manifest(path: str | Path) -> dict[str, Any] | None:
    """The folder's manifest, or None when it has none."""
    manifest = Path(path) / MANIFEST
    if not manifest.is_file():
        return None
    try:
        data = json.loads(manifest.read_text())
    except ValueError:
        raise CorruptArtifactError(path, "artefact", f"{MANIFEST} is unreadable") from None
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        raise CorruptArtifactError(path, "artefact", f"{MANIFEST} lists no files")
    return data


def artifact_problem(path: str | Path, kind: ArtifactKind,
                     hash_limit_bytes: int | None = HASH_LIMIT_BYTES) -> str | None:
    """What is wrong with the folder (missing, incomplete, damaged), or None when it can be used."""
    try:
        verify_artifact(path, kind, hash_limit_bytes)
    except CorruptArtifactError as exc:
        return exc.problem
    return None


def verify_artifact(path: str | Path, kind: ArtifactKind,
                    hash_limit_bytes: int | None = HASH_LIMIT_BYTES) -> Path:
    """``path`` when its files match its manifest (see the module docstring for legacy folders); otherwise
    :class:`~evoharness.errors.CorruptArtifactError` naming the folder and the first problem."""
    path = Path(path)
    if not path.is_dir():
        raise CorruptArtifactError(path, kind, "the folder is missing")
    manifest = read_manifest(path)
    if manifest is None:
        _check_legacy(path, kind)
        if path not in _warned_legacy:
            _warned_legacy.add(path)
            log.warning("%s folder %s has no %s (a trainer checkpoint, or saved before manifests existed): "
                        "checked its structure only", kind, path, MANIFEST)
        return path
    for name, expected in sorted(manifest["files"].items()):
        file = path / name
        if not file.is_file():
            raise CorruptArtifactError(path, kind, f"{name} is missing")
        size = file.stat().st_size
        if size != expected["size"]:
            raise CorruptArtifactError(path, kind,
                                       f"{name} has {size} bytes, its manifest says {expected['size']}")
        if (hash_limit_bytes is None or size <= hash_limit_bytes) and file_sha256(file) != expected["sha256"]:
            raise CorruptArtifactError(path, kind, f"{name} differs from its manifest (sha256)")
    return path


def _check_legacy(path: Path, kind: ArtifactKind) -> None:
    missing = _legacy_dataset_missing(path) if kind == "dataset" else _legacy_model_missing(path)
    if missing:
        raise CorruptArtifactError(path, kind, f"no {MANIFEST} and {missing} is missing")


def _legacy_dataset_missing(path: Path) -> str | None:
    """The first file a ``datasets`` DatasetDict folder lacks (its index, a split's state, a data file)."""
    index = path / "dataset_dict.json"
    if not index.is_file():
        return "dataset_dict.json"
    try:
        splits = json.loads(index.read_text())["splits"]
    except (ValueError, KeyError):
        return "a readable dataset_dict.json"
    for split in splits:
        state = path / split / "state.json"
        if not state.is_file():
            return f"{split}/state.json"
        try:
            data_files = [f["filename"] for f in json.loads(state.read_text())["_data_files"]]
        except (ValueError, KeyError, TypeError):
            return f"a readable {split}/state.json"
        for name in data_files:
            if not (path / split / name).is_file():
                return f"{split}/{name}"
    return None


WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def _legacy_model_missing(path: Path) -> str | None:
    """The first file a Hugging Face model folder lacks (its config, its weights, a shard its index names)."""
    if not (path / "config.json").is_file():
        return "config.json"
    if any((path / name).is_file() for name in WEIGHT_FILES):
        return None
    for index in WEIGHT_INDEXES:
        if (path / index).is_file():
            try:
                shards = set(json.loads((path / index).read_text())["weight_map"].values())
            except (ValueError, KeyError, AttributeError):
                return f"a readable {index}"
            return next((name for name in sorted(shards) if not (path / name).is_file()), None)
    return WEIGHT_FILES[0]


def load_dataset_folder(path: str | Path) -> Any:
    """The ``datasets.DatasetDict`` saved at ``path``, verified first (a clear error, not a deep one)."""
    import datasets

    return datasets.load_from_disk(str(verify_artifact(path, "dataset")))
