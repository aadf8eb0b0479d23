"""Consolidation: raw teacher logs → BPE-annotated per-turn examples, audited against the engine; bank evolution."""
