"""Serve the ALFWorld walkthrough player on a loopback port in its own process (demos, benchmarks).

    python -m evoharness.testing.serve --split valid_seen --delay 0.2 [--fault-rate 0.2]

Prints ``PORT <n>`` on the first line of stdout once it listens; runs until stdin closes or it is killed.
"""

from __future__ import annotations

import argparse
import sys

from evoharness.testing.alfworld_player import WalkthroughPlayer
from evoharness.testing.loopback import Call, LoopbackServer, Reply, Responder
from evoharness.testing.responders import FaultInjector


class Delayed:
    """``inner``'s answer, ``delay_s`` later (a teacher's latency)."""

    def __init__(self, inner: Responder, delay_s: float) -> None:
        self.inner, self.delay_s = inner, delay_s

    def __call__(self, call: Call) -> Reply:
        reply = self.inner(call)
        return Reply(**{**reply.__dict__, "delay_s": max(reply.delay_s, self.delay_s)})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="valid_seen")
    parser.add_argument("--limit", type=int, default=None, help="First N games of the split.")
    parser.add_argument("--delay", type=float, default=0.0, help="Seconds added to every answer.")
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    responder: Responder = WalkthroughPlayer.for_split(args.split, args.limit)
    if args.fault_rate > 0:
        responder = FaultInjector(responder, rate=args.fault_rate, seed=args.seed)
    with LoopbackServer(Delayed(responder, args.delay)) as server:
        print(f"PORT {server.port}", flush=True)
        sys.stdin.read()  # until the parent closes our stdin


if __name__ == "__main__":
    main()
