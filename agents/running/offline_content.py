"""The offline model's canned work for the steps of its own plans (`offline_plans.py`): a
competitor price list, our price sheet, a note for the sales team, research findings, a
short report and the commander's closing words – plausible sample content, always the same
for the same input, so the trial reads like a team at work rather than an echo.

A step is recognised by the first line of its input (its instruction, as `offline_plans.py`
writes it); what it says also follows what reached it: the tiers chosen in the form, a
person's answer to the agent's question, and what people asked for in the thread ("Also, as
asked in the thread: …", added by the commander's `edit_step`). Any other step gets `None`
and the offline model's generic answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from flotilla.agents.running.offline_plans import (
    COMPETITOR_PRICES,
    DRAFT_NOTE,
    OUR_PRICES,
    POST_ANSWER,
    RESEARCH,
    REVIEW_DRAFT,
    WRITE_UP,
)

SAMPLE = "sample figures: the offline model looks nothing up"
TIERS = ("Starter", "Pro", "Enterprise")
OURS = {"Starter": 9, "Pro": 29, "Enterprise": 99}  # as in the trial's price-list.csv
OUR_TIERS = {
    "Starter": "1 seat, the core workspace, email support",
    "Pro": "up to 5 seats, integrations and single sign-on, priority support",
    "Enterprise": "unlimited seats, audit log, a named account manager",
}
COMPETITORS: dict[str, dict[str, int | None]] = {  # None: price on request
    "Acme": {"Starter": 12, "Pro": 35, "Enterprise": 120},
    "Globex": {"Starter": 10, "Pro": 32, "Enterprise": None},
    "Initech": {"Starter": 8, "Pro": 39, "Enterprise": 110},
}
COMPETITOR_TERMS = {
    "Acme": "10 % off when paid yearly",
    "Globex": "15 % off when paid yearly",
    "Initech": "a 30-day free trial",
}
YEARLY = "Paying yearly takes two months off (about 17 %)."
TRIAL = "We offer a 14-day free trial on every tier, no card needed."
# what a person may ask for in a form's notes or in the thread: the sentence that covers it
ASKS = (
    (("annual", "yearly", "discount"), YEARLY),
    (("trial",), TRIAL),
)
EMAIL_FINDINGS = (
    "The announcement email was opened by 48 % of recipients; the two follow-ups by 31 % and 22 %.",
    "Most clicks (62 %) went to the pricing page; the feature tour got 14 %.",
    "Replies asked mostly about moving from the old plan and about the free trial.",
)
GENERAL_FINDINGS = (
    "Three of the four sources agree on the main point; the oldest one (2021) does not.",
    "Cost decides most of the write-ups; the time it takes to set up comes second.",
    "No source has figures newer than last quarter: check them before quoting.",
)
EMAIL_WORDS = ("email", "e-mail", "newsletter", "mailing", "campaign")


@dataclass(frozen=True)
class Work:
    """A step's canned answer: the lines of its message and the summary later steps get."""

    lines: list[str]
    summary: str


@dataclass(frozen=True)
class Given:
    """What reached the step: its input, a person's answer to its question, files read."""

    task: str
    answer: str | None
    read: Sequence[str]

    @property
    def asked(self) -> list[str]:
        """What people asked for in the thread, in the order they asked."""
        found = re.findall(r"^Also, as asked in the thread: (.+)$", self.task, re.M)
        return [a.strip() for a in found if a.strip()]

    def field(self, name: str) -> str | None:
        """A form answer's field as passed on in the input ("tiers: Pro")."""
        found = re.search(rf"\b{name}: ([^;\n]+)", self.task)
        return found.group(1).strip() if found else None

    def after(self, label: str) -> str:
        """The rest of the input line starting with `label` (an upstream summary)."""
        found = re.search(rf"^{re.escape(label)}\s*(.*)$", self.task, re.M)
        return found.group(1).strip() if found else ""


def canned(task: str, headline: str, answer: str | None, read: Sequence[str]) -> Work | None:
    """The canned work of a step of the offline model's plans; None for any other step."""
    for instruction, work in WORKS:
        if headline.startswith(instruction):
            return work(Given(task, answer, read))
    return None


def note_text(task: str) -> str:
    """The note the writer files as `note.md` (Markdown)."""
    given = Given(task, None, ())
    tiers = _tiers(given)
    lines = [f"# {_note_title(tiers)}", "", _NOTE_OPENING, ""]
    lines += [f"- {line}" for line in _note_points(given, tiers)]
    return "\n".join([*lines, "", _NOTE_CLOSING]) + "\n"


# --- the diamond: compare our pricing and draft a note -------------------------------------


def _competitor_prices(given: Given) -> Work:
    lines = [f"competitors' list prices a month, per tier ({SAMPLE})"]
    for name, prices in COMPETITORS.items():
        listed = ", ".join(f"{tier} {_euros(prices[tier])}" for tier in TIERS)
        lines.append(f"- {name}: {listed}; {COMPETITOR_TERMS[name]}")
    lines += _extras(given)
    lines += [f"- {r}" for r in given.read]
    short = ", ".join(
        f"{name} " + "/".join(_euros(prices[t]) for t in TIERS)
        for name, prices in COMPETITORS.items()
    )
    summary = f"{short} (Starter/Pro/Enterprise a month)"
    if given.read:
        summary += f"; {given.read[0][:160]}"
    return Work(lines, summary)


def _our_prices(given: Given) -> Work:
    lines = ["our price sheet, a month per tier"]
    lines += [f"- {tier} {_euros(OURS[tier])}: {OUR_TIERS[tier]}" for tier in TIERS]
    lines.append(f"- {YEARLY}")
    lines += _extras(given)
    seats = {"Starter": "1 seat", "Pro": "5 seats", "Enterprise": "unlimited seats"}
    summary = ", ".join(f"{t} {_euros(OURS[t])} ({seats[t]})" for t in TIERS)
    return Work(lines, summary + "; yearly billing takes two months off")


def _draft_note(given: Given) -> Work:
    tiers = _tiers(given)
    lines = ["a draft note for the sales team (also in note.md)", _note_title(tiers)]
    lines += [_NOTE_OPENING, *(f"- {p}" for p in _note_points(given, tiers)), _NOTE_CLOSING]
    if len(tiers) == 1:
        summary = f"{tiers[0]} is {_standing(tiers[0], short=True)}"
    else:
        summary = "; ".join(f"{t}: {_standing(t, short=True)}" for t in tiers)
    covered = list(dict.fromkeys(_covers(a) for a in _notes_and_asks(given)))
    if covered:
        summary += "; the note also mentions " + _and(covered)
    return Work(lines, summary)


def _review_draft(given: Given) -> Work:
    draft = given.after("Draft:")
    files = given.after("Files:")
    where = f"in {files}, above" if files and files != "(none)" else "above"
    lines = [f"Done. The note for the sales team is ready for your review ({where})."]
    if draft:
        lines.append(f"In short: {draft[:1].upper()}{draft[1:]}.")
    return Work(lines, f"the note for sales is ready for review ({where})")


_NOTE_OPENING = "Hi team – where we stand against the three competitors you hear about most:"
_NOTE_CLOSING = "Lead with the price; questions about the figures go to this thread."


def _note_title(tiers: Sequence[str]) -> str:
    return f"How our {_tier_names(tiers)} pricing compares"


def _note_points(given: Given, tiers: Sequence[str]) -> list[str]:
    points = [_standing(tier) for tier in tiers]
    points += [_covering(text) for text in _notes_and_asks(given)]
    return list(dict.fromkeys(points))  # a note says a thing once


def _tiers(given: Given) -> list[str]:
    chosen = given.field("tiers") or ""
    named = [t for t in TIERS if t.lower() in chosen.lower()]
    return named or list(TIERS)  # "All tiers", or no answer: every tier


def _standing(tier: str, *, short: bool = False) -> str:
    """Our price of `tier` against each competitor's: "17 % below Acme (€35), …"."""
    ours = OURS[tier]
    parts = []
    for name, prices in COMPETITORS.items():
        theirs = prices[tier]
        if theirs is None:
            parts.append(f"{name} quotes on request")
            continue
        percent = int(abs(theirs - ours) * 100 / theirs + 0.5)
        side = "below" if ours < theirs else "above" if ours > theirs else "level with"
        where = f"{percent} % {side} {name}" if ours != theirs else f"level with {name}"
        parts.append(where if short else f"{where} ({_euros(theirs)})")
    compared = _and(parts)
    return compared if short else f"{tier} ({_euros(ours)} a month) is {compared}."


def _notes_and_asks(given: Given) -> list[str]:
    notes = given.field("notes")
    return ([notes] if notes else []) + given.asked


def _covering(text: str) -> str:
    """The note's sentence for something a person asked it to mention."""
    low = text.lower()
    for words, sentence in ASKS:
        if any(w in low for w in words):
            return sentence
    return f"As asked: {text.rstrip('.?!')}."


def _covers(text: str) -> str:
    low = text.lower()
    if any(w in low for w in ASKS[0][0]):
        return "the annual discount"
    if any(w in low for w in ASKS[1][0]):
        return "the free trial"
    return f"“{text[:80]}”"


# --- the chain: research, then write it up -------------------------------------------------


def _research(given: Given) -> Work:
    topic = _topic(given.after("Request:"))
    about_email = any(w in topic.lower() for w in EMAIL_WORDS)
    findings = EMAIL_FINDINGS if about_email else GENERAL_FINDINGS
    lines = [f"key findings on {topic} ({SAMPLE.replace('figures', 'findings')})"]
    lines += [f"{i}. {f}" for i, f in enumerate(findings, 1)]
    lines += _extras(given)
    lines += [f"- {r}" for r in given.read]
    if about_email:
        gist = "announcement opened by 48 %, follow-ups by 31 % and 22 %; 62 % of clicks went "
        gist += "to pricing; replies ask about moving from the old plan and the free trial"
    else:
        gist = "most sources agree on the main point; cost decides, set-up time comes second; "
        gist += "the figures need a check before they are quoted"
    focus = f" (focused on {given.answer.replace(':', ',')})" if given.answer else ""
    return Work(lines, f"On {topic}{focus}: {gist}")


def _write_up(given: Given) -> Work:
    findings = given.after("Findings:")
    found = re.match(r"On (.+?): (.+)$", findings)
    topic, gist = (found.group(1), found.group(2)) if found else ("the topic", findings)
    if "48 %" in gist:
        body = [
            "The announcement did its job: almost half of the list opened it and most clicks "
            "went straight to pricing.",
            "The follow-ups lost a third and then half of those readers: next time, one "
            "strong email beats three.",
            "Answer the two questions people asked most – moving from the old plan, the free "
            "trial – in the announcement itself.",
        ]
        gist_short = "one strong announcement beats three emails; answer the common questions "
        gist_short += "up front"
    else:
        body = [
            f"What we found: {gist}." if gist else "The research found little to go on.",
            "Recommendation: decide on cost first, and check the figures before quoting them.",
        ]
        gist_short = "decide on cost first; check the figures before quoting them"
    lines = [f"a short report for the team: {topic}", *body]
    lines += [f"- {_covering(a)}" for a in given.asked]
    return Work(lines, f"report on {topic}: {gist_short}")


def _post_answer(given: Given) -> Work:
    report = given.after("Write-up:")
    lines = ["Done. The report is above."]
    if report:
        lines.append(f"In short: {report[:1].upper()}{report[1:]}.")
    return Work(lines, "the report is posted above")


def _topic(request: str) -> str:
    """ "research our launch emails and write a short report" -> "our launch emails"."""
    text = re.sub(r"\[[a-z ]+\]", " ", request)
    text = re.sub(r"^.*?\b(?:research|investigate|find out(?: about)?|look into)\b", "", text)
    text = re.split(r"\s+(?:and|then)\s+(?:write|draft|report|summar)", text, maxsplit=1)[0]
    topic = " ".join(text.split()).strip(" .,:;")
    return topic[:80] or "the topic"


# --- shared --------------------------------------------------------------------------------


def _extras(given: Given) -> list[str]:
    """Lines for a person's answer to the agent's question and for asks in the thread."""
    lines = [f"- Focused as you asked: {given.answer}"] if given.answer else []
    lines += [f"- Asked in the thread: {a} – noted for the write-up" for a in given.asked]
    return lines


def _euros(amount: int | None) -> str:
    return "on request" if amount is None else f"€{amount}"


def _tier_names(tiers: Sequence[str]) -> str:
    return "Starter, Pro and Enterprise" if len(tiers) == len(TIERS) else _and(list(tiers))


def _and(parts: Sequence[str]) -> str:
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


WORKS: tuple[tuple[str, Callable[[Given], Work]], ...] = (
    (COMPETITOR_PRICES, _competitor_prices),
    (OUR_PRICES, _our_prices),
    (DRAFT_NOTE, _draft_note),
    (REVIEW_DRAFT, _review_draft),
    (RESEARCH, _research),
    (WRITE_UP, _write_up),
    (POST_ANSWER, _post_answer),
)
