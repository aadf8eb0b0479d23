"""``collect --dry-run``: what a collection would cost, from registered prices and measured turns.

Turns per episode come from stored episodes of the same game and mode: the teacher's own, else the
expert's scaled by how many turns the teacher takes per expert turn on games both played (1 when none).
Tokens per turn are the teacher's measured ones; a teacher with none yet gets the length of the expert's
prompts and answers at the characters per token measured on every teacher that reported tokens (4 when
none has). Nothing is called and nothing is written.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from evoharness.collection import CollectionConfig, episode_bank, plan_episodes
from evoharness.teachers.registry import TeacherRegistry
from warehouse import Warehouse, load_query

DEFAULT_CHARS_PER_TOKEN = 4.0
EXPERT = "expert"


@dataclass(frozen=True)
class CollectionEstimate:
    teacher: str
    episodes: int  # to run (planned minus already stored)
    already_stored: int
    turns: float
    turns_source: str
    input_tokens: float
    output_tokens: float
    tokens_source: str
    cost_usd: float | None  # None: the teacher has no registered prices
    spent_usd: float  # the teacher's attempt ledger so far
    max_spend_usd: float | None  # the teacher's registry cap
    run_cap_usd: float | None

    def rows(self) -> list[tuple[str, str]]:
        """(field, value) pairs for a table."""
        cost = "unknown (no registered prices)" if self.cost_usd is None else f"${self.cost_usd:.4f}"
        per = self.turns / self.episodes if self.episodes else 0.0
        rows = [("episodes to run", f"{self.episodes} ({self.already_stored} already stored)"),
                ("turns", f"{self.turns:.0f} ({per:.1f} per episode; {self.turns_source})"),
                ("input tokens", f"{self.input_tokens:.0f}"), ("output tokens", f"{self.output_tokens:.0f}"),
                ("tokens per turn from", self.tokens_source), ("estimated cost", cost),
                ("spent so far (ledger)", f"${self.spent_usd:.4f}")]
        if self.max_spend_usd is not None:
            rows.append(("teacher cap (max_spend_usd)", f"${self.max_spend_usd:g}"))
        if self.run_cap_usd is not None:
            rows.append(("run cap (--max-spend-usd)", f"${self.run_cap_usd:g}"))
        return rows

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _turns_by_game(warehouse: Warehouse, teacher: str, mode: str) -> dict[str, dict[str, float]]:
    _, rows = warehouse.query("estimate_turns", teacher=teacher, mode=mode)
    found: dict[str, dict[str, float]] = {teacher: {}, EXPERT: {}}
    for who, game_id, _episodes, mean_turns in rows:
        found[who][game_id] = float(mean_turns)
    return found


def estimate_turns(games: list[str], own: dict[str, float], expert: dict[str, float], max_steps: int
                   ) -> tuple[float, str]:
    """Total turns of one episode per entry of ``games`` (a game id per planned episode) and their source."""
    shared = [g for g in own if g in expert]
    ratio = sum(own[g] for g in shared) / sum(expert[g] for g in shared) if shared else 1.0
    own_mean = sum(own.values()) / len(own) if own else None
    expert_mean = sum(expert.values()) / len(expert) if expert else None
    total, used = 0.0, set()
    for game in games:
        if game in own:
            total, source = total + own[game], "the teacher's own episodes"
        elif game in expert:
            total, source = total + expert[game] * ratio, (
                f"the expert's episodes of the same games × {ratio:.2f} (the teacher's turns per expert turn)"
                if shared else "the expert's episodes of the same games")
        elif own_mean is not None:
            total, source = total + own_mean, "the teacher's mean over its other games"
        elif expert_mean is not None:
            total, source = total + expert_mean * ratio, "the expert's mean over other games"
        else:
            total, source = total + max_steps, "the step budget (no stored episodes: an upper bound)"
        used.add(source)
    return total, "; ".join(sorted(used)) or "nothing to run"


def tokens_per_turn(warehouse: Warehouse, teacher: str, mode: str) -> tuple[float, float, str]:
    """(input, output) tokens per turn and where they come from."""
    columns, rows = warehouse.query("estimate_tokens", mode=mode)
    by_teacher = {row[0]: dict(zip(columns, row)) for row in rows}
    own = by_teacher.get(teacher)
    if own and own["measured_turns"]:
        n = own["measured_turns"]
        return own["input_tokens"] / n, own["output_tokens"] / n, f"the teacher's {n} measured turns"
    measured = [r for r in by_teacher.values() if r["measured_turns"] and r["measured_prompt_chars"]]
    chars = sum(r["measured_prompt_chars"] + (r["measured_output_chars"] or 0) for r in measured)
    tokens = sum(r["input_tokens"] + (r["output_tokens"] or 0) for r in measured)
    per_token = chars / tokens if tokens else DEFAULT_CHARS_PER_TOKEN
    basis = own if own and own["turns"] else by_teacher.get(EXPERT)
    if not basis or not basis["turns"]:
        raise LookupError(f"no stored turns of {teacher!r} or the expert in {mode} mode to measure tokens from; "
                          f"collect a few expert episodes first (`evoharness collect --teacher expert --mode {mode}`)")
    where = "the teacher's" if basis is own else "the expert's"
    calibration = (f"{per_token:.2f} characters per token measured on {len(measured)} teacher(s)" if tokens
                   else f"{per_token:g} characters per token (nothing measured yet)")
    n = basis["turns"]
    return (basis["prompt_chars"] / n / per_token, basis["output_chars"] / n / per_token,
            f"the length of {where} {n} stored turns at {calibration}")


def estimate_collection(config: CollectionConfig, warehouse: Warehouse,
                        registry: TeacherRegistry | None = None) -> CollectionEstimate:
    registry = registry or TeacherRegistry.load(config.teachers_file)
    teacher = registry.get(config.teacher)
    specs = plan_episodes(config, episode_bank(config, warehouse))
    done = warehouse.finished_episode_ids(config.teacher)
    todo = [spec for spec in specs if spec.episode_id not in done]
    mode = config.mode.value
    turns_by = _turns_by_game(warehouse, config.teacher, mode)
    turns, turns_source = estimate_turns([s.game.game_id for s in todo], turns_by[config.teacher],
                                         turns_by[EXPERT], config.max_steps)
    if todo:
        per_in, per_out, tokens_source = tokens_per_turn(warehouse, config.teacher, mode)
    else:
        per_in, per_out, tokens_source = 0.0, 0.0, "nothing to run"
    n_in, n_out = turns * per_in, turns * per_out
    cost = None
    if teacher.price_in is not None and teacher.price_out is not None:
        cost = (n_in * teacher.price_in + n_out * teacher.price_out) / 1_000_000
    spent = float(warehouse.scalar(load_query("teacher_spend"), {"teacher": config.teacher}))
    return CollectionEstimate(
        teacher=config.teacher, episodes=len(todo), already_stored=len(specs) - len(todo), turns=turns,
        turns_source=turns_source, input_tokens=n_in, output_tokens=n_out, tokens_source=tokens_source,
        cost_usd=cost, spent_usd=spent, max_spend_usd=teacher.max_spend_usd, run_cap_usd=config.max_spend_usd,
    )
