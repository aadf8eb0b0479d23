"""``python -m evoharness_cli ...`` runs the command line, like the ``evoharness`` console script."""

from evoharness_cli.cli import app

app()
