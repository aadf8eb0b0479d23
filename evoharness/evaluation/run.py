"""Play a student model version on the evaluation splits and summarise it next to its teacher.

A student plays through the same runner, environment and harness as a teacher: it is wrapped as a
``local_hf`` policy named after its model version, so its episodes, steps and harness calls land in the
warehouse like any teacher's, marked ``policy_kind = 'student'`` with their ``model_version`` (students are
never rows of ``teachers``), and the ``policy_evaluation`` view reads both side by side. Bpe-mode
students recall from the frozen Experience bank version their training dataset recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field, model_validator

from evoharness.agents.records import EpisodeRecord
from evoharness.artifacts import verify_artifact
from evoharness.collection import CollectionConfig, CollectionResult, collect
from evoharness.collection_processes import collect_in_processes, local_processes
from evoharness.errors import UnknownModelVersionError
from evoharness.harness.prompts import Mode
from evoharness.teachers.clients.structured import StructuredOutputs
from evoharness.teachers.registry import Provider, TeacherRegistry, TeacherSpec
from evoharness.training.student_card import read_student_card, student_prompt_set
from warehouse import Warehouse

EVAL_SPLITS = ("valid_seen", "valid_unseen")
NO_REPEAT_SUFFIX = ".no-repeat"
UNCONSTRAINED_SUFFIX = ".unconstrained"


class EvaluationConfig(BaseModel):
    """How a model version is evaluated. Greedy decoding by default (``temperature`` None)."""

    model_version: str = Field(description="A trained model version (see the model_versions table).")
    splits: tuple[str, ...] = Field(default=EVAL_SPLITS, description=(
        "Evaluation splits: dev, where choices are made, and the held-out valid_seen and valid_unseen, played once "
        "per final version (also train)."))
    limit: int | None = Field(default=None, description="First N games per split (None: the full split).")
    mode: Mode | None = Field(default=None, description="bpe or react (None: the mode the student trained in).")
    max_steps: int = Field(default=70, ge=1, description="Step budget per episode.")
    max_tokens: int = Field(default=128, ge=1, description="Completion tokens per turn.")
    temperature: float | None = Field(default=None, ge=0, description="Sampling temperature (None: greedy).")
    constrain_actions: bool = Field(default=True, description="Decode actions constrained to the admissible "
                                    "commands and meta-actions (local students).")
    avoid_repeats: bool = Field(default=False, description=(
        "Constrained decoding also leaves out the environment commands the episode already issued in the same state "
        "(observation and admissible commands): a decoding rule over the same weights, whose episodes are the "
        "policy '<version>.no-repeat'."))
    concurrency: int = Field(default=16, ge=1, description="Episodes in flight; their turns generate as one batch.")
    engine: str | None = Field(default=None, description="textworld or fast (None: the library default).")
    workers: int | None = Field(default=None, ge=0, description="Environment worker processes (None: by engine; "
                                "fast plays in-process).")
    processes: int | None = Field(default=None, ge=1, description=(
        "Processes that share each split's games (a local student: one core each). None: a local student plays "
        "in one per core, as many as fit in half the memory and have `concurrency` games each "
        "(collection_processes.local_processes); a served one in 1."))
    data_root: str | None = Field(default=None, description="ALFWORLD_DATA folder (None: $ALFWORLD_DATA).")
    checkpoint: int | None = Field(default=None, ge=1, description=(
        "Play the checkpoint its training saved at this optimizer step (<version folder>/checkpoints/checkpoint-N) "
        "instead of its final weights, as the policy '<version>.step-N': a curve over training, on dev or train "
        "only (choosing a step is a choice, made on dev). None: the final weights."))
    serve_url: str | None = Field(default=None, description=(
        "An OpenAI-compatible server (vllm serve, SGLang, TGI) serving the version, e.g. http://host:8000/v1; "
        "None: the version plays in this process (local_hf)."))
    served_model: str | None = Field(default=None, description=(
        "The model name on that server (None: the model version id; `vllm serve PATH --served-model-name ID`)."))
    api_key_env: str | None = Field(default=None, description="Env var holding the server's key, if it needs one.")
    structured_outputs: StructuredOutputs | None = Field(default=None, description=(
        "A served version with constrain_actions: the server's structured-output option that takes the turn "
        "grammar (vllm, vllm-guided, sglang), so it decodes as it does here; None: it plays unconstrained."))

    @model_validator(mode="after")
    def _repeats_need_constraints(self) -> EvaluationConfig:
        if self.avoid_repeats and not self.constrained:
            raise ValueError("avoid_repeats works through constrained decoding: it needs constrain_actions (and, "
                             "with serve_url, structured_outputs)")
        if self.checkpoint is not None and (self.serve_url or set(self.splits) & set(EVAL_SPLITS)):
            raise ValueError("a checkpoint plays locally and on dev or train only: choosing a step is a choice, "
                             "made on dev (the held-out splits are played once, by the final weights)")
        return self

    @property
    def constrained(self) -> bool:
        """Whether its actions decode constrained: in this process, or by a server that takes the turn grammar."""
        return self.constrain_actions and (self.serve_url is None or self.structured_outputs is not None)

    @property
    def policy(self) -> str:
        """The name its episodes are stored under: the model version, suffixed by a non-default decoding rule
        (so a served version decoding unconstrained never shares its episodes, or its resumption, with the same
        version played constrained)."""
        weights = self.model_version if self.checkpoint is None else f"{self.model_version}.step-{self.checkpoint}"
        if self.avoid_repeats:
            return f"{weights}{NO_REPEAT_SUFFIX}"
        return weights if self.constrained else f"{weights}{UNCONSTRAINED_SUFFIX}"


@dataclass
class EvaluationResult:
    model_version: str
    by_split: dict[str, CollectionResult]
    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)  # policy_evaluation rows of the student and its teacher
    mode: Mode = Mode.BPE  # the mode it played in
    policy: str = ""  # the name its episodes carry (EvaluationConfig.policy; "": the model version)

    def __post_init__(self) -> None:
        self.policy = self.policy or self.model_version

    def success_rate(self, split: str) -> float | None:
        """The student's overall success on ``split`` (None when it played no episode there)."""
        index = {c: i for i, c in enumerate(self.columns)}
        for row in self.rows:
            if row[index["policy"]] == self.policy and row[index["split"]] == split \
                    and row[index["task_type"]] == "ALL":
                return float(row[index["success_rate"]])
        return None


def student_policy(wh: Warehouse, config: EvaluationConfig) -> tuple[TeacherSpec, int | None]:
    """The model version as a policy (local, or served by an OpenAI-compatible server when ``serve_url`` is set),
    and the Experience bank version of its training dataset. Either way its episodes carry its name."""
    row = wh.one("model_version_player", model_version=config.model_version)
    if row is None:
        raise UnknownModelVersionError(config.model_version, "train it first (sft_student / `evoharness sft`)")
    weights = row[0] if config.checkpoint is None else checkpoint_folder(row[0], config.checkpoint)
    if config.serve_url is None:
        verify_artifact(weights, "model")  # a damaged folder is one clear line, not an error deep in loading
    mode = config.mode or Mode(read_student_card(row[0]).get("settings", {}).get("view", "bpe"))
    served = {"provider": Provider.OPENAI_COMPATIBLE, "model": config.served_model or config.model_version,
              "base_url": config.serve_url, "api_key_env": config.api_key_env,
              "structured_outputs": config.structured_outputs if config.constrained else None,
              } if config.serve_url else {"provider": Provider.LOCAL_HF, "model": str(weights)}
    spec = TeacherSpec(name=config.policy, price_in=0.0, price_out=0.0, max_concurrency=config.concurrency,
                       max_tokens=config.max_tokens, temperature=config.temperature, mode=mode, distill_games=None,
                       prompt_template=student_prompt_set(row[0], mode), constrain_actions=config.constrained,
                       avoid_repeats=config.avoid_repeats, **served)
    return spec, row[1]


def checkpoint_folder(model_folder: str, step: int) -> Path:
    """The checkpoint a version's training saved at optimizer step ``step``; a missing one is a one-line error
    naming the steps that were saved."""
    checkpoints = Path(model_folder).parent / "checkpoints"
    folder = checkpoints / f"checkpoint-{step}"
    if not folder.is_dir():
        saved = sorted(int(p.name.split("-")[1]) for p in checkpoints.glob("checkpoint-*") if p.name[11:].isdigit())
        raise UnknownModelVersionError(f"{Path(model_folder).parent.name}.step-{step}",
                                       f"its training saved checkpoints at steps {saved or 'none'}")
    return folder


def evaluate(wh: Warehouse, config: EvaluationConfig, run_id: str,
             on_progress: Callable[[str, int, int, EpisodeRecord], None] | None = None) -> EvaluationResult:
    """Play ``config.model_version`` on each split (resumable: finished episodes are kept) and summarise."""
    spec, bank_version = student_policy(wh, config)
    mode = spec.mode  # the mode asked for, or the one the student trained in
    processes = config.processes or (local_processes(spec.model, config.limit, config.concurrency)
                                     if spec.provider is Provider.LOCAL_HF and spec.model else 1)
    registry = TeacherRegistry([spec])
    by_split: dict[str, CollectionResult] = {}
    for split in config.splits:
        collection = CollectionConfig(
            teacher=spec.name, mode=mode, split=split, limit=config.limit, max_steps=config.max_steps,
            concurrency=config.concurrency, engine=config.engine, workers=config.workers,
            data_root=config.data_root, bank_version=bank_version if mode is Mode.BPE else None,
        )
        progress = None if on_progress is None else (
            lambda done, total, record, split=split: on_progress(split, done, total, record))
        if processes > 1:
            wh.release()  # the processes write the file between them
            by_split[split] = collect_in_processes(collection, wh.path, run_id, processes, registry,
                                                   config.model_version, progress)
        else:
            by_split[split] = collect(collection, wh, run_id, on_progress=progress, registry=registry,
                                      model_version=config.model_version)
    columns, rows = wh.query("policy_evaluation_for", policy=spec.name, model_version=config.model_version,
                             mode=mode.value, max_steps=config.max_steps)
    return EvaluationResult(config.model_version, by_split, columns, rows, mode, spec.name)
