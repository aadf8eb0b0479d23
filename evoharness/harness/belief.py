"""Belief: the agent's world state, kept by a deterministic parser of observations (no LLM call).

The harness only knows this protocol; each domain ships its own parser (ALFWorld's is
:class:`evoharness.envs.alfworld.belief.AlfworldBelief`).
"""

from __future__ import annotations

from typing import Any, Protocol


class Belief(Protocol):
    """A scene graph updated from observations, queryable by ``track`` and rendered into the prompt."""

    def reset(self, observation: str, objective: str) -> None:
        """Start from the first observation of an episode."""
        ...

    def update(self, command: str, observation: str) -> None:
        """Apply the observation that followed an environment command."""
        ...

    def track(self, query: str) -> str:
        """Answer a ``track [query]`` meta-action: matching objects and relations, else visited places."""
        ...

    def render(self) -> str:
        """A compact text view for the prompt (size-capped)."""
        ...

    def render_compact(self) -> str:
        """The same view in fewer tokens (for small students' prompt sets)."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """A JSON-serialisable copy of the scene graph, for audits and training data."""
        ...
