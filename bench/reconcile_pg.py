"""Benchmark: step transitions per second on one PostgreSQL with 1, 2 and 4 processes.

Each run gets a throw-away schema in the given database, C conversations each with an
S-step chain (one step in flight), and P worker processes (`python bench/reconcile_pg.py
worker …`) that start together. A worker reports the result of each in-flight step of
its conversations – `Reconciler.reconcile` with the outcome and an event key, which
records the result and the next dispatch – until every plan completed, with
`--in-flight` conversations in flight at once in all, split evenly between the processes
(a fixed offered load, as a fixed number of clients would be; an executor's runs finish
concurrently), or `--per-process N` in flight in each process. Conversation i belongs to
worker i mod P; with `--race` every worker reports every result (as when the message
event and the process that ran the step both report it): the conflicts then go through
the optimistic retry and the event de-duplication.

A step transition is a reconcile that changed the plan. Printed per run: transitions,
wall time from the start signal to the last worker's end, transitions/s, the ratio to
1 process, the double dispatches found in the outbox (dispatch rows of the same step
and attempt, or of the same step more than once: must be 0), the workers' CPU time per
transition, the local PostgreSQL server's CPU per transition (/proc, all its processes:
it counts only when the server runs on this machine and nothing else uses it much), the CPU
per transition of the server processes (backends) serving the workers' connections alone
(found by their `application_name`, the run's schema: other clients of a shared server do
not count, nor do the server's background writers and WAL writer) and how
busy the whole machine was meanwhile (/proc/stat: anything else running counts too).

    .venv/bin/python bench/reconcile_pg.py                    # 1, 2, 4 processes, 8 in flight
    .venv/bin/python bench/reconcile_pg.py --race --repeats 2
    .venv/bin/python bench/reconcile_pg.py --per-process 8    # the load grows with processes
    .venv/bin/python bench/reconcile_pg.py --url postgresql+asyncpg://postgres@host/db
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.reconcile import NOW, chain, conversation  # noqa: E402
from flotilla.agents.planning.plan import Plan, StepSucceeded  # noqa: E402
from flotilla.agents.reconciling.reconciler import Reconciler  # noqa: E402
from flotilla.storage.db import Database  # noqa: E402
from flotilla.storage.migrate import upgrade  # noqa: E402
from flotilla.storage.outbox import outbox_t  # noqa: E402

DEFAULT_URL = os.environ.get(
    "FLOTILLA_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)


EXTRA = os.environ.get("BENCH_PG_SETTINGS", "").split(",")


def database(url: str, schema: str) -> Database:
    settings = {"search_path": schema, "application_name": f"bench {schema}"}
    settings |= dict(s.split("=", 1) for s in EXTRA if s)
    return Database(url, connect_args={"server_settings": settings})


# --- a worker process --------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    """A conversation as the parent started it: its plan and the steps in flight (index,
    attempt) – what an executor that ran them knows, so the driver reads nothing first."""

    conversation_id: int
    plan_id: int
    running: tuple[tuple[int, int], ...]

    def encoded(self) -> str:
        running = "+".join(f"{index}.{attempt}" for index, attempt in self.running)
        return f"{self.conversation_id}/{self.plan_id}/{running}"

    @classmethod
    def decoded(cls, text_: str) -> Started:
        cid, plan_id, running = text_.split("/")
        steps = (tuple(int(n) for n in step.split(".")) for step in running.split("+"))
        return cls(int(cid), int(plan_id), tuple((index, attempt) for index, attempt in steps))


async def drive(reconciler: Reconciler, started: Started, tag: str, counts: Counter[str]) -> None:
    """Report each in-flight step of one conversation until its plan completed."""
    plan_id, running = started.plan_id, started.running
    while running:
        outcomes = [StepSucceeded(index=i, attempt=n, summary="ok") for i, n in running]
        key = "done:" + ",".join(f"{plan_id}.{i}.{n}" for i, n in running) + tag
        cid = started.conversation_id
        decision = await reconciler.reconcile(cid, event_key=key, outcomes=outcomes)
        assert decision is not None
        counts["reconciles"] += 1
        counts["transitions"] += decision.changed
        plan: Plan = decision.plan
        running = tuple(
            (s.index, s.attempts)
            for s in plan.steps
            if s.status == "in_progress" and plan.status == "running"
        )


async def worker(url: str, schema: str, ids: list[Started], concurrency: int, race: bool) -> None:
    db = database(url, schema)
    reconciler = Reconciler(db, clock=lambda: NOW)
    # connect the pool's connections before the start (a connection's set-up is not a step)
    first = ids[0].conversation_id
    await asyncio.gather(*(reconciler.plan(first) for _ in range(concurrency)))
    print("ready", flush=True)
    sys.stdin.readline()  # the start signal
    counts = Counter[str]()
    tag = f":{os.getpid()}" if race else ""
    queue: asyncio.Queue[Started] = asyncio.Queue()
    for cid in ids:
        queue.put_nowait(cid)

    async def lane() -> None:
        while not queue.empty():
            await drive(reconciler, queue.get_nowait(), tag, counts)

    t0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    print(json.dumps(dict(counts) | {"elapsed": elapsed, "cpu": cpu}), flush=True)
    sys.stdin.readline()  # the parent read its backends' CPU: the connections may go
    await db.dispose()


def postgres_cpu(pids: list[int] | None = None) -> float:
    """CPU seconds used so far by the local PostgreSQL server's processes (0 if not local),
    from /proc: the database's share of a transition. With `pids`: those processes only."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    stats = [Path(f"/proc/{pid}/stat") for pid in pids] if pids is not None else None
    for stat in stats if stats is not None else Path("/proc").glob("[0-9]*/stat"):
        try:
            text_ = stat.read_text()
        except OSError:
            continue  # gone meanwhile
        name = text_[text_.index("(") + 1 : text_.rindex(")")]
        if name.startswith("postgres"):
            fields = text_[text_.rindex(")") + 2 :].split()
            total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / tick
    return total


async def backend_pids(admin: AsyncEngine, schema: str) -> list[int]:
    """The server processes serving the run's connections (their `application_name`)."""
    async with admin.connect() as conn:
        query = text("SELECT pid FROM pg_stat_activity WHERE application_name = :name")
        return list((await conn.execute(query, {"name": f"bench {schema}"})).scalars())


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine so far (/proc/stat)."""
    fields = [float(f) for f in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


# --- the parent ----------------------------------------------------------------------------


async def one_run(args: argparse.Namespace, processes: int) -> dict[str, float]:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    admin = create_async_engine(args.url)
    async with admin.begin() as conn:
        await conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    db = database(args.url, schema)
    try:
        await upgrade(db)
        reconciler = Reconciler(db, clock=lambda: NOW)
        ids = []
        for i in range(args.conversations):
            cid = await conversation(db, f"pg.{i}")
            plan = (await reconciler.start_steps(cid, chain(args.steps))).plan
            running = tuple((s.index, s.attempts) for s in plan.steps if s.status == "in_progress")
            ids.append(Started(cid, plan.id, running))
        procs = []
        for n in range(processes):
            mine = ids if args.race else ids[n::processes]
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    __file__,
                    "worker",
                    args.url,
                    schema,
                    ",".join(started.encoded() for started in mine),
                    str(args.per_process or max(1, args.in_flight // processes)),
                    "race" if args.race else "own",
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                )
            )
        for proc in procs:
            assert proc.stdout is not None
            assert (await proc.stdout.readline()).decode().strip() == "ready"
        pids = await backend_pids(admin, schema)
        own0 = postgres_cpu(pids)
        t0, (busy0, total0), pg0 = time.perf_counter(), machine_cpu(), postgres_cpu()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        reports = []
        for proc in procs:
            assert proc.stdout is not None
            reports.append(json.loads(await proc.stdout.readline()))
        wall = time.perf_counter() - t0
        busy1, total1 = machine_cpu()
        pg_cpu = postgres_cpu() - pg0
        own_cpu = postgres_cpu(pids) - own0  # before the workers close their connections
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"bye\n")
            await proc.stdin.drain()
        for proc in procs:
            assert await proc.wait() == 0
        async with db.read() as conn:
            rows = await conn.execute(
                select(outbox_t.c.idempotency_key, outbox_t.c.conversation_id).where(
                    outbox_t.c.kind == "post_dispatch"
                )
            )
            keys = [k for k, _ in rows]
        per_key = Counter(keys)
        per_step = Counter(k.rsplit(":attempt:", 1)[0] for k in keys)
        doubles = sum(n - 1 for n in per_key.values() if n > 1) + sum(
            n - 1 for n in per_step.values() if n > 1
        )
        assert len(per_step) == args.conversations * args.steps, len(per_step)
        transitions = sum(r["transitions"] for r in reports)
        return {
            "transitions": transitions,
            "reconciles": sum(r["reconciles"] for r in reports),
            "wall": wall,
            "rate": transitions / wall,
            "doubles": doubles,
            "cpu_ms": 1000 * sum(r["cpu"] for r in reports) / max(transitions, 1),
            "machine_busy": (busy1 - busy0) / max(total1 - total0, 1),
            "pg_ms": 1000 * pg_cpu / max(transitions, 1),
            "backends_ms": 1000 * own_cpu / max(transitions, 1),
        }
    finally:
        await db.dispose()
        async with admin.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        await admin.dispose()


async def main(args: argparse.Namespace) -> None:
    counts = [int(p) for p in args.processes.split(",")]
    print(
        f"PostgreSQL, {args.conversations} conversations × {args.steps}-step chains, "
        + (
            f"{args.per_process} conversations in flight per process, "
            if args.per_process
            else f"{args.in_flight} conversations in flight in all, "
        )
        + f"{'every process reports every result (race)' if args.race else 'partitioned'}; "
        f"{args.repeats} repeats, interleaved"
    )
    rates: dict[int, list[float]] = {}
    for repeat in range(args.repeats):
        for processes in counts:
            r = await one_run(args, processes)
            rates.setdefault(processes, []).append(r["rate"])
            print(
                f"repeat {repeat + 1} processes {processes}: {r['transitions']:.0f} transitions "
                f"in {r['wall']:.2f} s = {r['rate']:.0f}/s; {r['reconciles']:.0f} reconciles, "
                f"double dispatches {r['doubles']:.0f}; CPU per transition: workers "
                f"{r['cpu_ms']:.2f} ms, PostgreSQL {r['pg_ms']:.2f} ms (the workers' backends "
                f"{r['backends_ms']:.2f} ms); machine busy "
                f"{100 * r['machine_busy']:.0f} %",
                flush=True,
            )
    base = statistics.median(rates[counts[0]])
    print(f"\ntransitions/s (median of {args.repeats}) and ratio to {counts[0]} process(es):")
    for processes, values in rates.items():
        median = statistics.median(values)
        print(
            f"  {processes} processes: {median:.0f}/s  (min {min(values):.0f}, max "
            f"{max(values):.0f})  ratio {median / base:.2f}"
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        url, schema, ids, concurrency, mode = sys.argv[2:7]
        asyncio.run(
            worker(
                url,
                schema,
                [Started.decoded(i) for i in ids.split(",")],
                int(concurrency),
                mode == "race",
            )
        )
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--conversations", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--per-process", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--race", action="store_true")
    asyncio.run(main(parser.parse_args()))
