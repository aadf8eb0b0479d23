"""``evoharness teacher add|list|costs``: the teacher registry from the command line.

``add`` writes ``teachers.yaml`` (``$EVOHARNESS_TEACHERS``), the truth for teachers, and reconciles the
warehouse ``teachers`` table with it. Dagster derives its teacher partitions from the same file
(``new_teacher_sensor`` on its next tick, or ``evoharness init`` at once); the command line never imports Dagster.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from evoharness.harness.prompts import Mode
from evoharness.teachers.clients.structured import StructuredOutputs
from evoharness.teachers.registry import (
    DEFAULT_DISTILL_GAMES,
    Provider,
    TeacherRegistry,
    TeacherSpec,
    reconcile_warehouse,
    registry_path,
)
from evoharness.teachers.retry import RetryConfig
from evoharness_cli.cli_common import DbOption, console, fail, print_table, validation_message
from warehouse import Warehouse, default_db_path

teacher_app = typer.Typer(help="Register and inspect teachers (teachers.yaml, mirrored in the warehouse).",
                          no_args_is_help=True)
RegistryOption = Annotated[Path | None, typer.Option("--registry", help="Registry file (default: $EVOHARNESS_TEACHERS "
                                                        "or teachers.yaml).")]


def add(
    name: Annotated[str, typer.Argument(help="Registry name (lower case; also the Dagster partition key).")],
    provider: Annotated[Provider, typer.Option(help="Who serves the model.")],
    model: Annotated[str | None, typer.Option(help="Model id (local_hf: a local model folder).")] = None,
    base_url: Annotated[str | None, typer.Option(help="API endpoint (required for openai_compatible).")] = None,
    api_key_env: Annotated[str | None, typer.Option(help="NAME of the env var that holds the key.")] = None,
    price_in: Annotated[float | None, typer.Option(help="USD per million input tokens.")] = None,
    price_out: Annotated[float | None, typer.Option(help="USD per million output tokens.")] = None,
    max_concurrency: Annotated[int, typer.Option(help="Episodes (calls) in flight at most.")] = 8,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature (default: provider's).")] = None,
    max_tokens: Annotated[int, typer.Option(help="Completion tokens per turn.")] = 512,
    mode: Annotated[Mode, typer.Option(help="Default interface: bpe or react.")] = Mode.BPE,
    prompt_template: Annotated[str, typer.Option(help="Prompt set id; {mode} is filled in.")] = "alfworld/{mode}",
    max_attempts: Annotated[int, typer.Option(help="Attempts per call before the episode fails.")] = 6,
    timeout: Annotated[float, typer.Option(help="Seconds per HTTP request.")] = 60.0,
    distill_games: Annotated[int | None, typer.Option(help="Train games a distillation run collects on [default: "
                                                          "every train game outside dev].")] = DEFAULT_DISTILL_GAMES,
    max_spend_usd: Annotated[float | None, typer.Option(help="USD this teacher may spend in all (failed attempts "
                                                        "included); runs stop starting episodes there.")] = None,
    auto_distill: Annotated[bool, typer.Option(help="Let the Dagster sensor start this teacher's distillation run "
                                               "by itself (after a passing preflight, within its cap).")] = False,
    bank_version: Annotated[int | None, typer.Option(help="bpe mode: the Experience bank version its episodes "
                                                        "recall from (a served student: the one it trained with) "
                                                        "[default: the seed bank].")] = None,
    structured_outputs: Annotated[StructuredOutputs | None, typer.Option(
        help="openai_compatible: hold each action to the admissible commands and meta-actions through the server's "
             "structured outputs (vllm, vllm-guided, sglang) [default: unconstrained].")] = None,
    registry: RegistryOption = None,
    db: DbOption = None,
) -> None:
    """Register (or update) a teacher in teachers.yaml; the warehouse teachers table is reconciled with it."""
    try:
        spec = TeacherSpec(
            name=name, provider=provider, model=model, base_url=base_url, api_key_env=api_key_env,
            price_in=price_in, price_out=price_out, max_concurrency=max_concurrency, temperature=temperature,
            max_tokens=max_tokens, mode=mode, prompt_template=prompt_template,
            retry=RetryConfig(max_attempts=max_attempts, timeout_s=timeout), distill_games=distill_games,
            max_spend_usd=max_spend_usd, auto_distill=auto_distill, bank_version=bank_version,
            constrain_actions=structured_outputs is not None, structured_outputs=structured_outputs,
        )
    except ValidationError as exc:
        raise typer.BadParameter(validation_message(exc)) from None
    if spec.provider is Provider.EXPERT:
        raise typer.BadParameter("the expert teacher is built in; register model teachers only")
    reg = TeacherRegistry.load(registry)
    changed = reg.add(spec)
    path = reg.save(registry or registry_path())
    with Warehouse(db or default_db_path()) as warehouse:
        stale = reconcile_warehouse(warehouse, reg)
    console.print(f"{'registered' if changed else 'unchanged'} {name!r} in {path} (sha {spec.sha256[:12]})")
    console.print(f"warehouse: teachers table reconciled with the registry in {db or default_db_path()}"
                  + (f" (no longer registered: {', '.join(stale)})" if stale else ""))
    console.print("Dagster: new_teacher_sensor adds the teacher's partition from the registry on its next tick "
                  "(or run `evoharness init` now)")
    console.print(f"auto distillation: {'on (the sensor preflights it, then starts its run)' if auto_distill else 'off'}"
                  f"{'' if spec.max_spend_usd is None else f'; spend cap ${spec.max_spend_usd:g}'}")
    if spec.api_key_env and not os.environ.get(spec.api_key_env):
        console.print(f"[yellow]note: ${spec.api_key_env} is not set in this shell; collection will need it.")


def list_teachers(registry: RegistryOption = None) -> None:
    """The registered teachers with their settings (key variable names only, never keys)."""
    reg = TeacherRegistry.load(registry)
    columns = ["name", "provider", "model", "base_url", "api_key_env", "price_in", "price_out", "max_concurrency",
               "mode", "distill_games", "max_spend_usd", "auto_distill"]
    rows = [(spec.name, spec.provider.value, spec.model, spec.base_url,
             f"${spec.api_key_env}" if spec.api_key_env else None, spec.price_in, spec.price_out,
             spec.max_concurrency, spec.mode.value, spec.distill_games or "all", spec.max_spend_usd,
             "yes" if spec.auto_distill else "no") for spec in reg]
    print_table(f"teachers in {reg.path} (prices: USD per million tokens)", columns, rows)


def check(
    name: Annotated[str, typer.Argument(help="Registered teacher to preflight.")],
    mode: Annotated[Mode | None, typer.Option(help="Prompt set to check [default: the teacher's mode].")] = None,
    registry: RegistryOption = None,
) -> None:
    """Preflight a teacher: one real call that must come back, with the key accepted, in the turn format."""
    from evoharness.teachers.preflight import run_preflight

    reg = TeacherRegistry.load(registry)
    try:
        reg.get(name)
    except KeyError as exc:
        raise typer.BadParameter(str(exc).strip("\"'"), param_hint="NAME") from None
    result = run_preflight(name, mode, reg)
    if not result.ok:
        raise fail(result.message)
    cost = "" if result.cost_usd is None else f" (cost ${result.cost_usd:.6f})"
    console.print(result.message + cost, markup=False, highlight=False, soft_wrap=True)


def costs(db: DbOption = None) -> None:
    """Success, steps, harness calls, tokens and cost per successful episode, per teacher and mode."""
    with Warehouse(db or default_db_path()) as warehouse:
        columns, rows = warehouse.query("teacher_costs")
    print_table("teacher_costs", columns, rows)  # wide: use a wide terminal, or query the view in DuckDB


TEACHER_COMMANDS: dict[str, Callable[..., None]] = {"add": add, "list": list_teachers, "check": check, "costs": costs}
"""Every ``evoharness teacher`` subcommand by name."""
for command_name, command in TEACHER_COMMANDS.items():
    teacher_app.command(command_name)(command)
