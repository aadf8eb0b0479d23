"""Known failures: each one's message is one line that names the thing and the fix.

Front ends (the command line, Dagster steps) show a known failure as that one line, never as a traceback:
:func:`known_failure_line` decides what is known. Everything else is a bug and keeps its traceback.

The ``Unknown…`` errors are also ``LookupError`` so that code which catches ``LookupError`` keeps working.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError


class EvoharnessError(Exception):
    """A known failure of the library: ``str()`` is one line naming the thing and the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))

    def __str__(self) -> str:  # never KeyError's quoted repr, should a subclass also be a KeyError
        return str(self.args[0])


class UnknownDatasetError(EvoharnessError, LookupError):
    """A dataset id the warehouse has no row for."""

    def __init__(self, dataset_id: str, fix: str = "curate it first (`evoharness curate`)") -> None:
        self.dataset_id = dataset_id
        super().__init__(f"Unknown dataset {dataset_id!r}: {fix}.")


_TRAIN_FIRST = "train it first (`evoharness sft`), or pass a version id from the model_versions table"


class UnknownModelVersionError(EvoharnessError, LookupError):
    """A model version id the warehouse has no row for (or whose folder is gone)."""

    role = "model version"

    def __init__(self, model_version: str, fix: str = _TRAIN_FIRST) -> None:
        self.model_version = model_version
        super().__init__(f"Unknown {self.role} {model_version!r}: {fix}.")


class UnknownParentVersionError(UnknownModelVersionError):
    """The model version a training starts from (``--parent-version``) is unknown."""

    role = "parent version"


class MissingInputError(EvoharnessError, LookupError):
    """A stage's input was not produced yet (e.g. no labelled turns before ``relabel`` ran)."""


_MAKERS = {"dataset": "`evoharness curate` or `relabel`", "model": "`evoharness sft` or `grpo`"}


class TrainingInProgressError(EvoharnessError):
    """Another process trains the same model version now (its output folder's training lock is held)."""

    def __init__(self, model_version: str, holder: str) -> None:
        self.model_version = model_version
        super().__init__(f"Model version {model_version!r} is being trained now by {holder}: wait for it to end, "
                         "or stop it and rerun (training resumes from its newest checkpoint).")


class CorruptArtifactError(EvoharnessError):
    """A dataset or model folder that is incomplete or damaged (a kill while saving, a deleted file)."""

    def __init__(self, path: str | Path, kind: str, problem: str) -> None:
        self.path = Path(path)
        self.kind = kind
        self.problem = problem
        super().__init__(f"{kind} folder {self.path} is incomplete or corrupt ({problem}): rerun the command "
                         f"that made it ({_MAKERS.get(kind, 'curate, sft or grpo')}) to rebuild it.")


def validation_message(exc: ValidationError) -> str:
    """Field and rule of each error of a pydantic ``ValidationError``, never the offending value (it might be
    a pasted key): ``field: rule; field: rule``."""
    return "; ".join(f"{'.'.join(str(part) for part in err['loc']) or 'entry'}: {err['msg']}"
                     for err in exc.errors())


def known_failure_types() -> tuple[type[BaseException], ...]:
    """Exceptions that mean bad input or an unusable setup, not a bug: shown as one line.

    ``LookupError`` is here (an unknown id), but its subclasses ``KeyError`` and ``IndexError`` are not: those
    are almost always bugs, see :func:`known_failure_line`."""
    from evoharness.collection import CollectionConfigError
    from evoharness.envs.alfworld.catalog import AlfworldDataError
    from evoharness.teachers.preflight import PreflightError
    from evoharness.teachers.registry import MissingCredentialsError, RegistryError
    from warehouse import MigrationDriftError, WarehouseOpenError

    return (EvoharnessError, MigrationDriftError, WarehouseOpenError, CollectionConfigError,
            AlfworldDataError, PreflightError, MissingCredentialsError, RegistryError, ValidationError,
            LookupError)


def known_failure_line(exc: BaseException) -> str | None:
    """The one line to show for a known failure; None for anything else (a bug: show its traceback)."""
    if isinstance(exc, EvoharnessError):
        return str(exc)
    if isinstance(exc, KeyError | IndexError) or not isinstance(exc, known_failure_types()):
        return None
    if isinstance(exc, ValidationError):
        return f"invalid {exc.title}: {validation_message(exc)}"
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
