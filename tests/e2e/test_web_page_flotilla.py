"""Flotilla in the browser page of the local workspace (headless Chromium): the walkthrough
with the mouse and keyboard, cancelling a plan, an admin adding an agent, App Home."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from flotilla.bot.listeners.feedback import THANKS
from flotilla.bot.local import LocalStack, start_local_stack
from flotilla.bot.service import Options
from flotilla.bot.trial import screenshot as readme_screenshot
from tests.e2e.browser import (
    assert_no_page_errors,
    browser,
    chromium_or_skip,
    open_page,
    screenshot,
)

__all__ = ["browser"]  # the fixture, imported for pytest

REQUEST = "compare our pricing with the top three competitors and draft a note for the sales team"


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[LocalStack]:
    started = await start_local_stack(
        f"sqlite+aiosqlite:///{tmp_path / 'page.db'}",
        options=Options(),
        ack_timeout=2.0,
        retry_delays=(0.0, 0.05, 0.05),
    )
    try:
        yield started
        async with asyncio.timeout(30):  # work in flight ends before the stack stops
            await started.service.settle()
    finally:
        await started.stop()


async def say(page: Page, text: str, where: str = "#composer") -> None:
    box = page.locator(f"{where} textarea")
    await box.fill(text)
    await box.press("Enter")


async def switch_to(page: Page, name: str) -> None:
    await page.locator("#person").select_option(label=name)
    await expect(page.locator("#me-avatar .avatar")).to_have_text(name[0].upper())


async def test_walkthrough_in_the_browser(stack: LocalStack, browser: Browser) -> None:
    page = await open_page(browser, stack.workspace.page_url + "?as=maya")
    await say(page, f"@Flotilla {REQUEST}")
    root = page.locator("#messages .message", has_text="compare our pricing")
    await expect(root.locator(".mention")).to_have_text("@flotilla")
    await root.locator(".replies-link").click()
    thread = page.locator("#thread-messages")
    card = thread.locator(".message", has=page.locator(".bk-header", has_text="Plan (5 steps)"))
    await expect(card).to_have_count(1)
    await expect(card.locator("b").first).to_be_visible()  # step titles are mrkdwn bold
    await expect(card.locator(".bk-button.bk-danger")).to_have_text("Cancel plan")
    form = thread.locator(".message", has_text="needs your input")
    await expect(form.locator(".bk-button.bk-primary")).to_have_text("Submit")
    await expect(form.locator(".bk-input")).to_have_count(2)  # answered here, no modal

    await switch_to(page, "dev")  # a teammate chimes in while the plan waits
    await say(page, "can we also mention the free trial?", "#thread-composer")
    await expect(thread.locator(".message", has_text="Noted")).to_have_count(1)

    await switch_to(page, "maya")
    notes = form.locator(".bk-input", has_text="mention").locator("textarea")
    await notes.fill("annual discount")
    await form.locator(".bk-button", has_text="Submit").click()  # no tier chosen: told so
    told = thread.locator(".message.ephemeral", has_text="Nothing was recorded yet")
    await expect(told).to_contain_text("Which tiers should the note compare? is required.")
    await expect(notes).to_have_value("annual discount")  # what was typed is still there
    await screenshot(page, "walkthrough-form")
    tiers = form.locator(".bk-input", has=page.locator(".bk-label", has_text="tier"))
    await tiers.locator("select").select_option("Pro")
    await form.locator(".bk-button", has_text="Submit").click()
    answered = thread.locator(".message", has_text="Answered by")
    await expect(answered).to_contain_text("@maya")
    await expect(answered).to_contain_text("annual discount")
    await expect(page.locator("#modal-backdrop")).to_be_hidden()  # no modal at any point
    final = thread.locator(".message", has_text="[offline model] commander:")
    await expect(final).to_have_count(1)
    await expect(card.locator(".bk-context")).to_contain_text("completed")
    await expect(card.locator(".edited")).to_have_count(1)  # the card was edited in place
    await screenshot(page, "walkthrough-done")
    assert_no_page_errors(page)


async def test_feedback_buttons_under_answers_are_clicked_in_the_page(
    stack: LocalStack, browser: Browser
) -> None:
    page = await open_page(browser, stack.workspace.page_url + "?as=maya")
    await say(page, "@Flotilla research our launch numbers and write a note")
    await page.locator("#messages .replies-link").click()
    thread = page.locator("#thread-messages")
    card = thread.locator(".message", has=page.locator(".bk-header"))
    await expect(card.locator(".bk-context")).to_contain_text("completed")
    marks = card.locator('.bk-section .emoji[data-emoji="✅"] svg')  # the steps' marks, drawn
    await expect(marks).not_to_have_count(0)
    rated = thread.locator(".message", has=page.locator(".bk-context-actions"))
    await expect(rated).not_to_have_count(0)
    await expect(thread.locator(".bk-unknown")).to_have_count(0)  # no "[context_actions block]"
    answer = rated.first
    thumbs_up = answer.get_by_role("button", name="This answer helped")
    await expect(thumbs_up.locator('.emoji[data-emoji="👍"] svg')).to_have_count(1)
    await expect(answer.get_by_role("button", name="This answer did not help")).to_have_count(1)
    await thumbs_up.click()  # the block action reaches Flotilla, which keeps it and says so
    thanks = thread.locator(".message.ephemeral", has_text=THANKS)
    await expect(thanks).to_have_count(1)
    await expect(thumbs_up).to_have_attribute("aria-pressed", "true")
    assert_no_page_errors(page)


async def test_an_agents_question_is_answered_inline_with_the_keyboard(
    stack: LocalStack, browser: Browser
) -> None:
    page = await open_page(browser, stack.workspace.page_url + "?as=maya")
    await say(page, "@Flotilla [ask] research the history of our launch emails and write it up")
    await page.locator("#messages .replies-link").click()
    question = page.locator("#thread-messages .message", has_text="asks:")
    await expect(question.locator(".bk-hint")).to_have_text("Press Enter to send")
    await question.locator("textarea").fill("focus on 2024")
    await question.locator("textarea").press("Enter")
    answered = page.locator("#thread-messages .message", has_text="Answered by")
    await expect(answered).to_contain_text("focus on 2024")
    await expect(page.locator("#thread-messages .message", has_text="Writer")).not_to_have_count(0)
    assert_no_page_errors(page)


async def test_cancel_from_the_plan_card_asks_first(stack: LocalStack, browser: Browser) -> None:
    page = await open_page(browser, stack.workspace.page_url + "?as=maya")
    await say(page, f"@Flotilla {REQUEST}")
    await page.locator("#messages .replies-link").click()
    card = page.locator("#thread-messages .message", has=page.locator(".bk-header"))
    # the card at rest (the plan waits for the form): a click while a live edit redraws it
    # could land on the button being replaced, and no dialog would open
    await expect(card).to_contain_text("waiting for a person")
    await card.locator(".bk-button", has_text="Cancel plan").click()
    dialog = page.locator("#confirm-backdrop .dialog")
    await expect(dialog.locator(".dialog-title")).to_have_text("Cancel this plan?")
    await dialog.get_by_role("button", name="Keep going").click()  # nothing happens
    await expect(dialog).to_be_hidden()
    await card.locator(".bk-button", has_text="Cancel plan").click()
    await dialog.get_by_role("button", name="Cancel plan").click()
    await expect(card.locator(".bk-context")).to_contain_text("cancelled")
    await expect(card.locator(".bk-button")).to_have_count(0)
    assert_no_page_errors(page)


async def test_an_admin_adds_an_agent_in_the_modal_and_app_home_shows_it(
    stack: LocalStack, browser: Browser
) -> None:
    page = await open_page(browser, stack.workspace.page_url + "?as=maya")
    await page.locator("#app-list .side-item", has_text="Flotilla").click()
    home = page.locator("#home")
    await expect(home.locator(".bk-header")).to_have_text("Flotilla")
    await expect(home.locator(".bk-section", has_text="Agents")).to_contain_text("researcher")
    await expect(home.locator(".bk-button", has_text="Add an agent")).to_have_count(0)

    await switch_to(page, "alex (admin)")  # App Home as an admin has the button
    await home.locator(".bk-button", has_text="Add an agent").click()
    modal = page.locator("#modal-backdrop .modal")
    await expect(modal.locator(".modal-title")).to_have_text("Add an agent")
    name = modal.locator('.bk-input[data-block-id="name"]')
    await name.locator("input").fill("Scout Bot")
    await (
        modal.locator(".bk-input", has_text="What it does")
        .locator("textarea")
        .fill("Finds leads for the sales team.")
    )
    instructions = modal.locator(".bk-input", has_text="Instructions")
    await instructions.locator("textarea").fill("You find leads. Be brief.")
    await modal.locator(".modal-submit").click()  # Flotilla refuses the name, under the field
    await expect(name.locator(".bk-error")).not_to_have_count(0)
    await name.locator("input").fill("scout")
    await screenshot(page, "admin-modal")
    await modal.locator(".modal-submit").click()
    await expect(page.locator("#modal-backdrop")).to_be_hidden()

    await page.locator(".tab", has_text="Home").click()  # opening the tab again refreshes it
    agents = home.locator(".bk-section", has_text=re.compile(r"^\s*Agents"))  # not the queue's
    await expect(agents).to_contain_text("scout")
    assert_no_page_errors(page)


async def test_the_readme_screenshot_command_writes_a_png(tmp_path: Path) -> None:
    chromium = chromium_or_skip()
    out = tmp_path / "page.png"
    # it refuses to write a picture without the whole form and the card's header in view
    await readme_screenshot(str(out), f"sqlite+aiosqlite:///{tmp_path / 'shot.db'}", chromium)
    assert out.read_bytes().startswith(b"\x89PNG\r\n")
