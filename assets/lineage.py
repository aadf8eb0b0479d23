"""Lineage in Dagster: the same ids and versions the warehouse rows carry, as asset metadata; inputs read
by id from the upstream materialization of the same partition (never "the newest row" of a table)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from evoharness.collection import CollectionResult
from evoharness.lineage import code_version

ASSET_CODE_VERSION = code_version()
"""Every asset's ``code_version``: the value stamped on the warehouse rows it writes (``code_version``)."""


def id_metadata(values: Mapping[str, Any]) -> dict[str, dg.MetadataValue]:
    """Ids and versions as text metadata (absent values are left out, never written as empty)."""
    out: dict[str, dg.MetadataValue] = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, list | tuple):
            out[key] = dg.MetadataValue.json(list(value))
        elif isinstance(value, bool):
            out[key] = dg.MetadataValue.bool(value)
        elif isinstance(value, int):
            out[key] = dg.MetadataValue.int(value)
        else:
            out[key] = dg.MetadataValue.text(str(value))
    return out


def collection_lineage(result: CollectionResult, run_id: str) -> dict[str, dg.MetadataValue]:
    """Who played, with which prompt and bank, under which code: the facts each episode row records."""
    return id_metadata({**result.lineage, "run_id": run_id})


def materialized_value(instance: dg.DagsterInstance, asset: str, key: str, partition: str | None,
                       run_id: str | None = None, lookback: int = 50) -> Any:
    """``key`` of ``asset``'s materialization metadata for ``partition`` (None: none): the materialization of run
    ``run_id`` first, else the newest."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition] if partition else None),
        limit=lookback,
    ).records
    found = [(r.run_id, r.asset_materialization) for r in records if r.asset_materialization is not None]
    found = [(run, m) for run, m in found if key in m.metadata]
    for _, materialization in sorted(found, key=lambda item: item[0] != run_id):
        return materialization.metadata[key].value
    return None


def upstream_value(context: dg.AssetExecutionContext, asset: str, key: str) -> Any:
    """``key`` of the upstream ``asset``'s materialization metadata for this partition (None: none).

    The materialization of this same run comes first (in a ``distill_teacher`` run the upstream asset was
    materialized just before, so an overlapping run of the same partition cannot swap its id in); outside a
    job run, the partition's latest materialization.
    """
    return materialized_value(context.instance, asset, key, context.partition_key, context.run.run_id)


def required_upstream(context: dg.AssetExecutionContext, asset: str, key: str, explicit: str | None) -> str:
    """``explicit`` (from run config) or the upstream materialization's ``key``; a clear failure when neither."""
    value = explicit or upstream_value(context, asset, key)
    if not value:
        raise dg.Failure(f"No {key} for partition {context.partition_key!r}: materialize {asset} for it first, "
                         f"or pass {key} in this asset's run config.", allow_retries=False)
    return str(value)
