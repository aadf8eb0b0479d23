"""Two policies compared game by game: on the same games, how many only one of them won, and how likely a split
that uneven is by chance (exact McNemar test). Success rates alone hide that two students can win the same share
of different games."""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

from warehouse import Warehouse


@dataclass(frozen=True)
class PairedOutcome:
    """One split's games both policies played to the end, by who won them."""

    split: str
    games: int
    both_won: int
    only_policy: int
    only_baseline: int
    neither: int

    @property
    def p_value(self) -> float:
        """Exact two-sided McNemar p: the chance that the discordant games split at least this unevenly if either
        policy were as likely to win each of them (1.0 when there are none)."""
        n, k = self.only_policy + self.only_baseline, min(self.only_policy, self.only_baseline)
        return min(1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2**n) if n else 1.0

    @property
    def success_gain(self) -> float:
        """The policy's success rate minus the baseline's on these games."""
        return (self.only_policy - self.only_baseline) / self.games

    COLUMNS = ("split", "games", "both won", "only policy", "only baseline", "neither", "gain", "p (McNemar)")

    def row(self) -> tuple[str, int, int, int, int, int, str, str]:
        return (self.split, self.games, self.both_won, self.only_policy, self.only_baseline, self.neither,
                f"{self.success_gain:+.1%}", f"{self.p_value:.3g}")


def paired_outcomes(wh: Warehouse, policy: str, baseline: str, max_steps: int = 70) -> list[PairedOutcome]:
    """Per split, ``policy`` against ``baseline`` on the games both played to the end at ``max_steps`` (empty when
    they share none)."""
    _, rows = wh.query("paired_outcomes", policy=policy, baseline=baseline, max_steps=max_steps)
    return [PairedOutcome(*row) for row in rows]
