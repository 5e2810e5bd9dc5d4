"""`python -m bench.chaos`: the chaos suite (see bench/chaos/run.py)."""

from bench.chaos.run import main

main()
