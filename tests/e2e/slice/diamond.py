"""The walkthrough's diamond driven through the local workspace (researcher ‖ analyst → a
form → writer → the synthesis): shared by `bench/slice.py` and the database budget test."""

from __future__ import annotations

from flotilla.bot.service import SlackService
from flotilla.bot.views.forms import SUBMIT_ACTION
from flotilla.local_slack import Driver, InstalledApp

REQUEST = "compare our pricing with the top three competitors and draft a note for the sales team"
STEPS = 5


async def walk_diamond(driver: Driver, commander: InstalledApp) -> None:
    """The request, the form opened and answered, until the synthesis is in the thread."""
    root = driver.mention("maya", "launch", commander, REQUEST)
    form = await driver.thread_has_message("launch", root.ts, containing="needs your input")
    await driver.click("maya", form, SUBMIT_ACTION, values={"field:tiers": "Pro"})
    await driver.thread_has_message("launch", root.ts, containing="[offline model] commander:")


async def at_rest(driver: Driver, service: SlackService) -> None:
    """Until Slack's events are delivered and the process has nothing under way, reading
    nothing to find out (`SlackService.quiet`): the count is the plan's work, not the
    harness's probes – `settle` also asks the database for due rows and waiting runs, as
    the running process's poll does once a poll interval whatever runs."""
    while True:
        await driver.deliveries_finished()
        seen = len(driver.ws.events.deliveries)
        await service.quiet()
        await driver.deliveries_finished()
        if len(driver.ws.events.deliveries) == seen and not service.executor.jobs:
            return
