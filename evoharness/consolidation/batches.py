"""Batch boundaries fixed by episode order: the same batches whichever episodes a killed run already did."""

from __future__ import annotations

from collections.abc import Sequence


def pending_batches(ordered_ids: Sequence[str], done: set[str], batch_size: int) -> list[list[str]]:
    """Cut ``ordered_ids`` (every planned episode, done or not) into consecutive batches of ``batch_size``;
    return each batch's episodes not in ``done``, dropping batches with none left.

    The cut is made before the done episodes are removed, so a batch is the same set in an uninterrupted run
    and in a rerun after a kill: a batch the killed run committed is skipped whole, the next one starts where
    the uninterrupted run's would.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    batches = ([i for i in ordered_ids[start:start + batch_size] if i not in done]
               for start in range(0, len(ordered_ids), batch_size))
    return [batch for batch in batches if batch]
