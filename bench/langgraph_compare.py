"""Benchmark: Flotilla's per-step orchestration cost beside LangGraph's, at equal durability.

Both run the same graphs with a zero-latency "model" (a step's work is free), each on its own
SQLite file in WAL mode, at the same `synchronous` setting (NORMAL, then FULL):
- Flotilla: the reconcile ("outcome recorded -> next dispatch recorded", one transaction
  with its outbox rows) *and* the delivery of those outbox rows to a recording port – what a
  step costs Flotilla end to end, minus Slack and the model. Wired as the executor wires it:
  the reconcile inserts its effects claimed for the process's sender and marks the previous
  deliveries sent in its own transaction; the sender delivers what was handed over without
  a claim transaction (`OutboxSender.deliver_handed`, what the executor's loop does when a
  handover woke it); the last deliveries are marked sent at the end (`flush`);
- LangGraph: `StateGraph.invoke(..., durability="sync")` with its SQLite checkpointer – a
  checkpoint written before each superstep starts the next.
The graphs: a chain of N steps and a diamond of L layers (top -> left, right -> join).
Runs are interleaved (Flotilla, LangGraph, Flotilla, …) so a busy machine slows both alike;
each repeat prints µs per step, and the summary prints the ratio Flotilla / LangGraph with
min / median / max over the repeats. Each run starts timing after a `gc.collect()`, so a
full collection the set-up's garbage would trigger is not counted as a step's cost (for
both alike). Needs the bench extra: `pip install -e '.[bench]'`.

    .venv/bin/python bench/langgraph_compare.py            # 200-step chain, 50 layers, 5 repeats
    .venv/bin/python bench/langgraph_compare.py --quick    # 40 steps, 10 layers, 3 repeats
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import operator
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.reconcile import (  # noqa: E402
    NOW,
    RecordingPort,
    chain,
    conversation,
    diamond,
    dispatched,
    report_in_flight,
)
from flotilla.agents.planning.plan import Step  # noqa: E402
from flotilla.agents.reconciling.outbox import OutboxSender  # noqa: E402
from flotilla.agents.reconciling.reconciler import Reconciler  # noqa: E402
from flotilla.storage.db import Database  # noqa: E402
from flotilla.storage.locks import sqlite_engine  # noqa: E402
from flotilla.storage.migrate import upgrade  # noqa: E402

try:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph
except ImportError:  # pragma: no cover - printed for a person
    sys.exit("LangGraph is a bench extra: pip install -e '.[bench]'")

Sync = Literal["NORMAL", "FULL"]


# --- Flotilla -------------------------------------------------------------------------


def _set_synchronous(db: Database, mode: Sync) -> None:
    """Both of Flotilla's engines on this file use `mode` (after storage/db.py's NORMAL)."""

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA synchronous = {mode}")
        cursor.close()

    for engine in (db.engine.sync_engine, sqlite_engine(db)):
        event.listen(engine, "connect", on_connect)


async def flotilla_per_step(
    folder: Path, steps: list[Step], mode: Sync, tag: str
) -> tuple[float, float]:
    """Seconds per step, wall and CPU: every reconcile plus the delivery of its outbox rows."""
    db = Database(f"sqlite+aiosqlite:///{folder / f'flotilla-{tag}.db'}")
    _set_synchronous(db, mode)
    await upgrade(db)
    sender = OutboxSender(db, RecordingPort(), clock=lambda: NOW)
    reconciler = Reconciler(db, clock=lambda: NOW, outbox=sender)  # as the executor wires it
    cid = await conversation(db, tag)
    gc.collect()  # the set-up's garbage is not a step's cost (both systems alike)
    t0, cpu0 = time.perf_counter(), time.process_time()
    decision = await reconciler.start_steps(cid, steps)
    await sender.deliver_handed()
    plan = decision.plan
    while plan.status == "running":
        # the steps in flight as an executor knows them: the dispatches it was handed
        decision = await report_in_flight(reconciler, cid, plan, tag, dispatched(decision))
        plan = decision.plan
        await sender.deliver_handed()
    await sender.flush()  # the last deliveries marked sent (each reconcile marked the others)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    assert plan.status == "completed", plan.status
    assert await sender.drain() == 0  # everything was handed over and delivered
    await db.dispose()
    return elapsed / len(steps), cpu / len(steps)


# --- LangGraph ------------------------------------------------------------------------


class State(TypedDict):
    request: str
    done: Annotated[list[str], operator.add]


def _node(name: str) -> Callable[[State], dict[str, list[str]]]:
    def work(_state: State) -> dict[str, list[str]]:
        return {"done": [name]}  # the zero-latency model's answer

    return work


def langgraph_of(steps: list[Step]) -> Any:
    graph: Any = StateGraph(State)  # typed loosely: LangGraph is an optional extra
    for step in steps:
        graph.add_node(f"s{step.index}", _node(f"s{step.index}"))
    waited_on = {w for step in steps for w in step.wait_for}
    for step in steps:
        name = f"s{step.index}"
        if not step.wait_for:
            graph.add_edge(START, name)
        elif len(step.wait_for) == 1:
            graph.add_edge(f"s{step.wait_for[0]}", name)
        else:  # a join waits for all of its inputs
            graph.add_edge([f"s{w}" for w in step.wait_for], name)
        if step.index not in waited_on:
            graph.add_edge(name, END)
    return graph


def langgraph_per_step(
    folder: Path, steps: list[Step], mode: Sync, tag: str
) -> tuple[float, float]:
    """Seconds per step, wall and CPU (of all threads: the process runs nothing else)."""
    connection = sqlite3.connect(folder / f"langgraph-{tag}.db", check_same_thread=False)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute(f"PRAGMA synchronous = {mode}")
    compiled = langgraph_of(steps).compile(checkpointer=SqliteSaver(connection))
    config = {"configurable": {"thread_id": tag}, "recursion_limit": len(steps) + 10}
    gc.collect()  # as for Flotilla
    t0, cpu0 = time.perf_counter(), time.process_time()
    final = compiled.invoke({"request": "bench", "done": []}, config, durability="sync")
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    assert len(final["done"]) == len(steps), len(final["done"])
    connection.close()
    return elapsed / len(steps), cpu / len(steps)


# --- the interleaved run --------------------------------------------------------------


def spread(values: list[float]) -> str:
    return f"min {min(values):.2f}  median {statistics.median(values):.2f}  max {max(values):.2f}"


async def main(quick: bool, repeats: int | None) -> None:
    chain_n, layers, rounds = (40, 10, 3) if quick else (200, 50, 5)
    rounds = repeats or rounds
    shapes = {f"{chain_n}-step chain": chain(chain_n), f"{layers}-layer diamond": diamond(layers)}
    ratios: dict[tuple[str, str], list[float]] = {}
    cpu_ratios: dict[tuple[str, str], list[float]] = {}
    print(
        f"SQLite WAL, zero-latency model; Flotilla = reconcile + outbox delivery, "
        f"LangGraph = invoke(durability='sync'); {rounds} interleaved repeats"
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for repeat in range(rounds):
            for mode in ("NORMAL", "FULL"):
                for shape, steps in shapes.items():
                    tag = f"{repeat}-{mode}-{shape.split()[0]}"
                    ours, our_cpu = await flotilla_per_step(folder, steps, mode, tag)
                    theirs, their_cpu = await asyncio.to_thread(
                        langgraph_per_step, folder, steps, mode, tag
                    )
                    ratios.setdefault((mode, shape), []).append(ours / theirs)
                    cpu_ratios.setdefault((mode, shape), []).append(our_cpu / their_cpu)
                    print(
                        f"repeat {repeat + 1} synchronous={mode:<6} {shape:<18} "
                        f"Flotilla {ours * 1e6:6.0f} µs/step ({our_cpu * 1e6:5.0f} CPU)  "
                        f"LangGraph {theirs * 1e6:6.0f} µs/step ({their_cpu * 1e6:5.0f} CPU)  "
                        f"ratio {ours / theirs:.2f} (CPU {our_cpu / their_cpu:.2f})"
                    )
    print("\nFlotilla / LangGraph per step, wall time (lower is better; goal <= 0.50):")
    for (mode, shape), values in ratios.items():
        print(f"  synchronous={mode:<6} {shape:<18} {spread(values)}")
    print("the same in CPU time (all threads of the process; steadier on a busy machine):")
    for (mode, shape), values in cpu_ratios.items():
        print(f"  synchronous={mode:<6} {shape:<18} {spread(values)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller graphs, 3 repeats")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats")
    args = parser.parse_args()
    asyncio.run(main(args.quick, args.repeats))
