"""Instructions a Python process executes, counted by valgrind's callgrind – a count that does
not move with the machine's load (the benches that use it: `bench/scheduler_callgrind.py`,
`bench/langgraph_callgrind.py`).

`instructions(script, args, work)` runs `python script *args` under
`valgrind --tool=callgrind` (with `PYTHONHASHSEED=0`: the same hashes, the same work each
time) and returns the total it collected. A bench runs each workload at two sizes and divides
the difference by the difference of the sizes, so the interpreter's start, the imports and
the first units' one-time costs cancel out (`per_unit`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

COLLECTED = re.compile(r"Collected : (\d+)")


def instructions(script: str, args: list[str], work: Path) -> int:
    """Instructions `python script *args` executed, under callgrind (its output in `work`)."""
    work.mkdir(parents=True, exist_ok=True)
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={work / 'callgrind.out'}",
        sys.executable,
        script,
        *args,
    ]
    env = os.environ | {"PYTHONHASHSEED": "0"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    found = COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"no instruction count from callgrind: {done.stderr[-2000:]}")
    return int(found.group(1))


def per_unit(small: int, big: int, units_small: float, units_big: float) -> float:
    """Instructions of one unit: the difference of two processes' counts over their units."""
    return (big - small) / (units_big - units_small)
