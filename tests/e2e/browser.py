"""Headless Chromium (Debian's package, driven by Playwright) for the browser-page tests.

The tests skip, saying why, only outside CI when Chromium or Playwright is missing; in CI
(CI=true) a missing browser is a failure, since `.ci/run` installs it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

CHROMIUM = Path(os.environ.get("FLOTILLA_TEST_CHROMIUM", "/usr/bin/chromium"))
TIMEOUT_MS = 15_000  # what a page may take to show a change (a whole plan runs in between)


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} – CI must run the browser tests (.ci/run installs it)")
    pytest.skip(reason)


def chromium_or_skip() -> str:
    """The system Chromium's path, once Playwright and the browser are known to be there."""
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        _unavailable("the playwright package is not installed (pip install -e '.[dev]')")
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} is missing (apt-get install chromium)")
    return str(CHROMIUM)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Chromium from the system package, headless; never a downloaded browser."""
    executable = chromium_or_skip()
    from playwright.async_api import async_playwright, expect

    expect.set_options(timeout=TIMEOUT_MS)
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=executable, headless=True)
        try:
            yield launched
        finally:
            await launched.close()


async def open_page(browser: Browser, url: str) -> Page:
    """A new tab on `url` that fails the test on any JavaScript error of the page."""
    context = await browser.new_context(viewport={"width": 1400, "height": 900})
    page = await context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    await page.goto(url)
    await page.locator("#live", has_text="live").wait_for()
    assert not errors, errors
    page_errors[id(page)] = errors
    return page


page_errors: dict[int, list[str]] = {}


def assert_no_page_errors(page: Page) -> None:
    errors = page_errors.get(id(page), [])
    assert not errors, f"the page logged errors: {errors}"


async def screenshot(page: Page, name: str) -> None:
    """Save a screenshot when FLOTILLA_SCREENSHOTS names a folder (to look at, not to commit)."""
    folder = os.environ.get("FLOTILLA_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(Path(folder) / f"{name}.png"))
