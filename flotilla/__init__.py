"""Flotilla: a Slack app that turns one assistant into a team.

Every module is imported as `flotilla.<layer>…`, the one top-level name an installed
Flotilla adds to an environment. The layers live in the repository's top-level folders
(`bot/`, `agents/`, `storage/`, `local_slack/`); the entries of this folder link to them,
so a checkout and the built wheel import the same names.
"""
