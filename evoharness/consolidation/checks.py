"""Audit rows: each Belief claim and each observable engine fact, checked one by one.

The rows mirror :func:`evoharness.envs.alfworld.belief.belief_accuracy` (same claims, same observables), so
that precision and recall can be recomputed in SQL from ``belief_checks`` alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evoharness.envs.alfworld.belief import AlfworldBelief
from evoharness.envs.base import WorldFacts


@dataclass(frozen=True)
class BeliefCheck:
    check_kind: str  # claim | observable
    aspect: str
    subject: str
    believed: str | None
    actual: str | None
    ok: bool

    def row(self, **keys: Any) -> dict[str, Any]:
        return keys | {"check_kind": self.check_kind, "aspect": self.aspect, "subject": self.subject,
                       "believed": self.believed, "actual": self.actual, "ok": self.ok}


def belief_checks(belief: AlfworldBelief, facts: WorldFacts) -> list[BeliefCheck]:
    """Every claim Belief makes and every engine fact it could have observed, each marked right or wrong."""
    rows: list[BeliefCheck] = []
    for obj, receptacle in sorted(belief.located.items()):
        actual = facts.located.get(obj, frozenset())
        rows.append(BeliefCheck("claim", "located", obj, receptacle, ",".join(sorted(actual)) or None,
                                receptacle in actual))
    for obj in belief.holding:
        rows.append(BeliefCheck("claim", "holding", obj, "held", "held" if obj in facts.holding else None,
                                obj in facts.holding))
    for receptacle in sorted(belief.opened):
        state = "open" if receptacle in facts.opened else "closed"
        rows.append(BeliefCheck("claim", "opened", receptacle, "open", state, state == "open"))
    for receptacle in sorted(belief.closed):
        state = "open" if receptacle in facts.opened else "closed"
        rows.append(BeliefCheck("claim", "closed", receptacle, "closed", state, state == "closed"))
    for obj, states in sorted(belief.flags.items()):
        actual_flags = facts.flags.get(obj, frozenset())
        for state in sorted(states):
            rows.append(BeliefCheck("claim", "flag", obj, state, ",".join(sorted(actual_flags)) or None,
                                    state in actual_flags))
    for obj, receptacles in sorted(facts.located.items()):
        if receptacles & belief.inspected:
            believed = belief.located.get(obj)
            rows.append(BeliefCheck("observable", "located", obj, believed, ",".join(sorted(receptacles)),
                                    believed in receptacles))
    for obj in sorted(facts.holding):
        rows.append(BeliefCheck("observable", "holding", obj, "held" if obj in belief.holding else None, "held",
                                obj in belief.holding))
    return rows


def facts_json(facts: WorldFacts) -> dict[str, Any]:
    """The engine facts as JSON (sorted, for stable storage)."""
    return {
        "located": {obj: sorted(receptacles) for obj, receptacles in sorted(facts.located.items())},
        "holding": sorted(facts.holding),
        "opened": sorted(facts.opened),
        "flags": {obj: sorted(states) for obj, states in sorted(facts.flags.items())},
        "agent_near": sorted(facts.agent_near),
    }
