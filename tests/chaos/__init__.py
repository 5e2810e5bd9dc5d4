"""Fast versions of the chaos suite's experiments 2, 4 and 5 (bench/chaos/): real
`flotilla run` processes on loopback, a few plans, assertions on the invariants."""
