"""Files, the pure part: which attachments are taken, what is text, what a written file may
be called, and the inbound `files` of a message event within Slack's limits."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flotilla.agents.tools.file_policy import (
    FilePolicy,
    clean_name,
    is_text,
    refusal,
    refusal_note,
    type_allowed,
)
from flotilla.bot.listeners.inbound import InvalidPayload, check_event

POLICY = FilePolicy(max_bytes=1000, allowed_types=("text/*", "application/pdf", "image/png"))


def test_refusals_say_why_in_a_sentence() -> None:
    assert refusal("a.csv", "text/csv", 10, POLICY) is None
    assert refusal("a.csv", "text/csv; charset=utf-8", None, POLICY) is None
    assert refusal("a.exe", "application/x-msdownload", 10, POLICY) == (
        "a.exe is application/x-msdownload, a type I do not take"
    )
    assert refusal("b.txt", "text/plain", 5000, POLICY) == (
        "b.txt is 4.9 kB, more than the 1000 bytes I take"
    )
    assert refusal("c", "", 1, POLICY) == "c is an unknown type, a type I do not take"
    assert refusal_note(["x"]) == "I cannot use this attachment: x. The plan goes on without it."
    assert refusal_note(["x", "y"]).startswith("I cannot use these attachments: x; y.")


def test_text_is_recognised_by_type_or_by_name_when_the_type_says_nothing() -> None:
    assert is_text("text/markdown", "n") and is_text("application/json", "n")
    assert is_text("application/octet-stream", "notes.md") and is_text("", "data.csv")
    assert not is_text("application/pdf", "a.txt") and not is_text("image/png", "a.png")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_a_written_files_name_never_leaves_its_folder(name: str) -> None:
    clean = clean_name(name)
    assert "/" not in clean and "\\" not in clean and not clean.startswith(".")
    assert len(clean) <= 255 and all(ch.isprintable() for ch in clean)


@settings(max_examples=200, deadline=None)
@given(st.from_regex(r"[a-z]{1,10}/[a-z0-9.+-]{1,20}", fullmatch=True))
def test_only_listed_types_are_allowed(mimetype: str) -> None:
    listed = mimetype.startswith("text/") or mimetype in ("application/pdf", "image/png")
    assert type_allowed(mimetype, POLICY) == listed
    assert type_allowed(mimetype.upper(), POLICY) == listed


def event_with(files: Any) -> dict[str, Any]:
    event = {
        "type": "message",
        "subtype": "file_share",
        "channel": "C123",
        "user": "U123",
        "ts": "1700000000.000100",
        "text": "",
        "files": files,
    }
    return {"type": "event_callback", "team_id": "T123", "event": event}


def a_file(**fields: Any) -> dict[str, Any]:
    url = "https://files.slack.com/files-pri/T1-F0123ABC/prices.csv"
    base = {"id": "F0123ABC", "name": "prices.csv", "mimetype": "text/csv", "size": 12}
    return base | {"url_private": url} | fields


def test_a_file_share_event_within_slacks_limits_is_read() -> None:
    assert check_event(event_with([a_file(), a_file(id="F0123ABD", title="x")])) == "message"


@pytest.mark.parametrize(
    "files",
    [
        [a_file(id="not-a-file-id")],
        [a_file(name="x" * 256)],
        [a_file(size=-1)],
        [a_file(url_private="javascript:alert(1)")],
        [a_file(mimetype="x" * 300)],
        [a_file(id=f"F{i:08d}") for i in range(101)],
        "not a list",
    ],
)
def test_files_outside_slacks_limits_are_refused(files: Any) -> None:
    with pytest.raises(InvalidPayload):
        check_event(event_with(files))


def test_media_goes_to_the_model_only_when_its_profile_reads_it() -> None:
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.profiles import ModelProfile

    from flotilla.agents.running.offline import respond
    from flotilla.agents.running.step_files import media_reader

    reads_all = media_reader(FunctionModel(respond))
    assert reads_all("image/png") and reads_all("application/pdf")
    text_only = media_reader(
        FunctionModel(
            respond, profile=ModelProfile(supports_image_input=False, supports_document_input=False)
        )
    )
    assert not text_only("image/png") and not text_only("application/pdf")
    pdf_only = media_reader(
        FunctionModel(
            respond,
            profile=ModelProfile(supported_document_media_types=frozenset({"application/pdf"})),
        )
    )
    assert pdf_only("application/pdf") and not pdf_only("application/msword")
    assert not media_reader("openai:gpt-5")("image/png")  # a model not built yet: names only


def test_a_file_field_is_asked_in_a_modal_and_answered_with_the_files_names() -> None:
    from flotilla.agents.planning.plan import FormField, FormSpec
    from flotilla.bot.views.forms import (
        FormKey,
        form_message,
        form_modal,
        modal_files,
        modal_values,
    )

    form = FormSpec(fields=[FormField(name="prices", label="The price list", kind="file")])
    key = FormKey(1, 2, 1, 1)
    _text, blocks = form_message(key, title="t", question="q", form=form, ask="U1")
    assert blocks[-1].to_dict()["elements"][0]["action_id"] == "flotilla_form_open"  # a modal
    modal = form_modal(key, title="t", question="q", form=form, metadata={}).to_dict()
    assert modal["blocks"][-1]["element"] == {
        "type": "file_input",
        "action_id": "value",
        "max_files": 10,
    }
    files = [{"id": "F1", "name": "a.csv"}, {"id": "F2", "name": "b.pdf"}]
    state = {"values": {"field:prices": {"value": {"type": "file_input", "files": files}}}}
    assert modal_values(state, form) == ({"prices": "a.csv, b.pdf"}, {})
    assert modal_files(state, form) == files
    empty = {"values": {"field:prices": {"value": {"type": "file_input", "files": []}}}}
    assert modal_values(empty, form) == ({}, {"field:prices": "The price list is required."})
