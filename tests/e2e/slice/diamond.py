"""The walkthrough's diamond driven through the local workspace (researcher ‖ analyst → a
form → writer → the synthesis): shared by `bench/slice.py` and the database budget test."""

from __future__ import annotations

from bot.views.forms import SUBMIT_ACTION
from local_slack import Driver, InstalledApp

REQUEST = "compare our pricing with the top three competitors and draft a note for the sales team"
STEPS = 5


async def walk_diamond(driver: Driver, commander: InstalledApp) -> None:
    """The request, the form opened and answered, until the synthesis is in the thread."""
    root = driver.mention("maya", "launch", commander, REQUEST)
    form = await driver.thread_has_message("launch", root.ts, containing="needs your input")
    await driver.click("maya", form, SUBMIT_ACTION, values={"field:tiers": "Pro"})
    await driver.thread_has_message("launch", root.ts, containing="commander: Review")
