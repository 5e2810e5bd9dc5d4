"""Tools: what an agent is given – its spec (`registry`: prompt, model, tools, MCP servers,
domains), the built-in tools (`ask_user`, `read_thread`, file tools and their policy), the
web fetch with its network guard, MCP toolsets, and the tool journal that keeps a resumed
run from calling a finished tool again.

Imports `agents.core` and `agents.planning` (and `storage/` for the agents table and journal).
"""
