"""Flotilla's agents layer, by stage: what a plan is, how it moves, who runs it, and how it shows.

The stages, bottom to top; a stage imports only the stages below it (and `storage/`),
checked by `tests/unit/test_layers.py`:

1. `core` – time, the error taxonomy and failure classes, bounded caches, metrics.
2. `planning` – the plan model, validation, transitions and the pure `decide`; typed effects.
3. `tools` – what an agent is given: its spec, built-in and file tools, web fetch, MCP.
4. `reconciling` – a conversation's plan advanced under its lock: inbox in, outbox out.
5. `scheduling` – the pure `admit` and the admission loop that grants run slots.
6. `running` – one attempt of a step or a commander turn: claim, agent run, report.
7. `delivering` – the executor: performs the decided effects in Slack and starts runs.
"""
