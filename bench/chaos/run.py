"""The chaos suite's command: `python -m bench.chaos [--experiment N ...] [--quick]`.

Each experiment runs real `flotilla run` processes on 127.0.0.1 against the local Slack
workspace and a fake OpenAI server, does its harm for a bounded time, waits (bounded) for
the plans to finish and prints a table of what it counted. Nothing is asserted here; the
fast versions in tests/chaos/ assert the invariants.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from bench.chaos.drive import Window
from bench.chaos.measure import Figures


async def experiment(number: int, quick: bool, seed: int) -> Figures:
    from bench.chaos import bad_inputs, faults, kills, outages

    with tempfile.TemporaryDirectory(prefix="flotilla-chaos-") as tmp:
        folder = Path(tmp)
        if number == 1:
            window = Window(12, 40, 150) if quick else Window(50, 150, 240)
            return await kills.replicas(folder, window, seed, (5.0, 15.0))
        if number == 2:
            window = Window(10, 40, 150) if quick else Window(40, 240, 240)
            kill_count, burst = (6, 10) if quick else (30, 30)
            return await kills.sqlite_kills(folder, window, seed, kill_count, burst)
        if number == 3:
            window = Window(20, 45, 150) if quick else Window(100, 180, 300)
            return await outages.postgres_outages(folder, window, seed, (5.0, 20.0))
        if number == 4:
            window = Window(10, 30, 150) if quick else Window(40, 120, 300)
            return await faults.slack_and_model_faults(folder, window, seed)
        if number == 5:
            return await bad_inputs.bad_inputs(folder, seed, 300 if quick else 1200)
    raise ValueError(f"no experiment {number}")


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--experiment",
        "-e",
        type=int,
        action="append",
        choices=range(1, 6),
        help="run this experiment (repeat for more); default: all five",
    )
    parser.add_argument("--quick", action="store_true", help="about 30-60 s of chaos each")
    parser.add_argument("--seed", type=int, default=15, help="the random seed")
    args = parser.parse_args()
    print(
        f"chaos suite, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, seed {args.seed}"
        f"{', quick' if args.quick else ''}",
        flush=True,
    )
    for number in args.experiment or range(1, 6):
        figures = asyncio.run(experiment(number, args.quick, args.seed))
        print()
        print(figures.table(), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
