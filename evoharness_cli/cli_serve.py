"""``evoharness serve``: a trained model version over an OpenAI-compatible HTTP API (the engine server or
``transformers serve``), until Ctrl-C or SIGTERM, so it can be registered as an ``openai_compatible`` teacher or
evaluated with ``--serve-url``."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from evoharness.serving import ServedModel, Server, ServeSettings, ServingError, stop_on_signals
from evoharness.training.model_versions import required_version
from evoharness_cli.cli_common import DbOption, console
from warehouse import Warehouse, default_db_path


def serve_command(
    model_version: Annotated[str, typer.Option(help="A trained model version (see the model_versions table).")],
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0: every interface).")] = "127.0.0.1",
    device: Annotated[str, typer.Option(help="cpu, cuda:0 or auto.")] = "cpu",
    server: Annotated[Server, typer.Option(help="evoharness: the engine server, which holds a turn to the grammar a "
                                                "request carries (register it with --structured-outputs vllm); "
                                                "transformers: transformers serve (no structured outputs).")]
        = ServeSettings.server,
    continuous_batching: Annotated[bool, typer.Option(help="transformers serve: decode the requests in flight "
                                                           "together (paged attention).")]
        = ServeSettings.continuous_batching,
    kv_cache_tokens: Annotated[int, typer.Option(help="transformers serve: the paged cache's capacity in tokens: "
                                                      "requests in flight × their longest context.")]
        = ServeSettings.kv_cache_tokens,
    max_batch: Annotated[int, typer.Option(help="The engine server: completions decoded together.")]
        = ServeSettings.max_batch,
    threads: Annotated[int | None, typer.Option(help="The server's torch threads (its OMP_NUM_THREADS); default: "
                                                     "this shell's.")] = ServeSettings.threads,
    db: DbOption = None,
) -> None:
    """Serve a model version's model folder (needs the `serve` extra) and print the `teacher add` line that
    registers it."""
    with Warehouse(db or default_db_path(), read_only=True) as wh:
        version = required_version(wh, model_version)
        player = wh.one("model_version_player", model_version=model_version)  # (folder, its dataset's bank)
    stop_on_signals()  # a kill (SIGTERM, SIGHUP) stops the server's child too, as Ctrl-C does, from here on
    try:
        served = ServedModel(version.path, ServeSettings(server=server, host=host, port=port, device=device,
                                                  continuous_batching=continuous_batching,
                                                  kv_cache_tokens=kv_cache_tokens, threads=threads,
                                                  max_batch=max_batch)).start()
    except ServingError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from None
    console.print(f"serving {model_version} at {served.base_url} as model {served.model!r} (log: {served.log_path})")
    rendering = f"--prompt-template {version.row['prompt_set']} " if version.row.get("prompt_set") else ""
    if player is not None and player[1] is not None:
        rendering += f"--bank-version {player[1]} "  # the Experience bank it trained with
    if server == "evoharness":
        rendering += "--structured-outputs vllm "  # its turns decode held to the game's commands, as locally
    console.print(f"register it: evoharness teacher add NAME --provider openai_compatible --model {served.model} "
                  f"--base-url {served.base_url} --price-in 0 --price-out 0 {rendering}--auto-distill "
                  "--max-spend-usd 1")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        console.print("stopping")
    finally:
        served.stop()
