"""Scheduling: which waiting runs start now, and why the others wait – the pure `admit`
(`scheduler`), its options and budgets, and the admission loop that grants slots in the
database across processes.

Imports `agents.core`, `agents.planning`, `agents.tools`, `agents.reconciling`.
"""
