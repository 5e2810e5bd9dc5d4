"""The offline model's plans: the shapes it proposes for the trial's requests (a diamond for
a comparison, a chain for research then writing), with the enabled agents that fit. Each
step's instruction (the first line of its input) is a constant: `offline_content.py` knows
the step by it and does its canned work."""

from __future__ import annotations

from typing import Any

COMPETITOR_PRICES = "Find the tiers and list prices of our main competitors."
OUR_PRICES = "Summarise our pricing tiers and what each includes."
DRAFT_NOTE = "Draft a short note for the sales team comparing our pricing with competitors."
REVIEW_DRAFT = "Review the draft and post the answer."
RESEARCH = "Research this and list the key findings."
WRITE_UP = "Write up the findings for the team."
POST_ANSWER = "Post the final answer."


def pick(roster: list[str], *hints: str) -> str:
    for hint in hints:
        for name in roster:
            if hint in name:
                return name
    return roster[0] if roster else "commander"


def diamond(roster: list[str], marks: str, *, bad: bool) -> list[dict[str, Any]]:
    researcher = pick(roster, "research")
    analyst = pick(roster, "analy", "research")
    writer = pick(roster, "writ")
    return [
        {
            "index": 1,
            "title": "Research competitors' pricing",
            "assignee": researcher,
            "input": COMPETITOR_PRICES + marks + "\nRequest: {{request}}",
            "wait_for": [],
        },
        {
            "index": 2,
            "title": "Survey our own pricing",
            "assignee": analyst,
            "input": OUR_PRICES + "\nRequest: {{request}}",
            "wait_for": [5] if bad else [],
        },
        {
            "index": 3,
            "title": "Choose the tiers to compare",
            "assignee": "user",
            "input": "Which tiers should the note compare?",
            "wait_for": [1, 2],
            "form": {
                "fields": [
                    {
                        "name": "tiers",
                        "label": "Which tiers should the note compare?",
                        "kind": "select",
                        "options": ["Starter", "Pro", "Enterprise", "All tiers"],
                    },
                    {
                        "name": "notes",
                        "label": "Anything the note must mention?",
                        "kind": "long_text",
                        "required": False,
                    },
                ]
            },
        },
        {
            "index": 4,
            "title": "Draft the note for sales",
            "assignee": writer,
            "input": (
                DRAFT_NOTE + "\nCompetitors: {{step_1.output_summary}}"
                "\nOur pricing: {{step_2.output_summary}}"
                "\nTiers to cover: {{step_3.output_summary}}"
            ),
            "wait_for": [3],
        },
        {
            "index": 5,
            "title": "Review and post the synthesis",
            "assignee": "commander",
            "input": (
                REVIEW_DRAFT + "\nDraft: {{step_4.output_summary}}\nFiles: {{step_4.output_files}}"
            ),
            "wait_for": [4],
        },
    ]


def chain(roster: list[str], marks: str, *, bad: bool) -> list[dict[str, Any]]:
    return [
        {
            "index": 1,
            "title": "Research the topic",
            "assignee": pick(roster, "research"),
            "input": RESEARCH + marks + "\nRequest: {{request}}",
        },
        {
            "index": 2,
            "title": "Write it up",
            "assignee": pick(roster, "writ"),
            "input": WRITE_UP + "\nFindings: {{step_1.output_summary}}",
            "wait_for": [3] if bad else [1],
        },
        {
            "index": 3,
            "title": "Post the synthesis",
            "assignee": "commander",
            "input": POST_ANSWER + "\nWrite-up: {{step_2.output_summary}}",
            "wait_for": [2],
        },
    ]
