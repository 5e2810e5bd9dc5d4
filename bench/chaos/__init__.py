"""Flotilla's chaos suite: real `flotilla run` processes on loopback, killed, cut off from
their database, fed Slack and model faults and bad input; each experiment prints a table.
Run `python -m bench.chaos --help`; bench/README.md has the figures."""
