"""Dagster assets, one module per stage. Thin: they call the library and write the warehouse."""
