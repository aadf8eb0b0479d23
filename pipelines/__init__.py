"""Dagster wiring: definitions, resources, partitions, jobs, sensors."""
