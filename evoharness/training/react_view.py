"""The ReAct view of a BPE dataset: the same teacher trajectories without the workspace.

For the BPE-vs-ReAct comparison a ReAct student trains on exactly the games and environment actions of the
BPE student. Each episode's environment turns are kept; meta-action turns are dropped, so the observation a
ReAct turn shows is the last environment observation, its recent actions hold environment commands only,
and its step counts environment steps.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any


def react_examples(rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Env turns of ``rows`` (one episode's examples in turn order, several episodes in sequence) with their
    ``turn_vars`` rewritten for a ReAct prompt set."""
    episode, last_obs, previous_kind, env_steps = None, "", "env", 0
    recent: list[str] = []
    for row in rows:
        turn_vars = json.loads(row["turn_vars"])
        if row["episode_id"] != episode:
            episode, last_obs, recent, previous_kind, env_steps = row["episode_id"], turn_vars["observation"], [], \
                "env", 0
        if previous_kind == "env":
            last_obs = turn_vars["observation"]
        previous_kind = row["kind"]
        if row["kind"] != "env":
            continue
        view = {k: turn_vars[k] for k in ("objective", "max_steps", "admissible_commands")}
        view |= {"observation": last_obs, "recent_actions": recent[-10:], "step": env_steps + 1}
        env_steps += 1
        recent.append(row["messages"][-1]["content"].split("<action>", 1)[-1].removesuffix("</action>"))
        yield row | {"turn_vars": json.dumps(view)}
