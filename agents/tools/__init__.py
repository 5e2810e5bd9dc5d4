"""Built-in tools of agent runs, and the MCP toolsets an agent is allowed to use."""
