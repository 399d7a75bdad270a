"""A chat model's replies to GAAMA's own fact and reflection prompts (``prompts/
fact_generation.md`` and ``reflection_generation.md``, recognised by their files' first line),
in the form those files ask for: one fact per new episode (``"<speaker> said: <text>"``, citing
that episode, concept ``chat_topic``), and one reflection citing the first two new facts."""

from __future__ import annotations

import json
import re

from upstream_files import ROOT

#: a listed episode: [<id>] [<session date>] [<session date>] <speaker>: <text>
EPISODE = re.compile(r"^\[(ep-[0-9a-f]{16})\] \[[^\]]*\] \[[^\]]*\] ([^:]+): (.*)$", re.MULTILINE)
FACT = re.compile(r"^\[(entity-[0-9a-f]{16})\] (.*)$", re.MULTILINE)
REFLECTION = "They talk often."


def first_line(name: str) -> str:
    return (ROOT / "gaama" / "prompts" / f"{name}.md").read_text().splitlines()[0]


def is_fact_prompt(prompt: str) -> bool:
    return prompt.startswith(first_line("fact_generation"))


def is_reflection_prompt(prompt: str) -> bool:
    return prompt.startswith(first_line("reflection_generation"))


def new_section(prompt: str) -> str:
    """The prompt's last section: the new episodes or new facts (each file ends with it)."""
    return prompt.rstrip().rsplit("\n\n", 1)[1]


def gaama_upstream_reply(prompt: str) -> str:
    if is_fact_prompt(prompt):
        episodes = EPISODE.findall(new_section(prompt))
        assert episodes, prompt[-300:]
        return json.dumps({
            "facts": [{"fact_text": f"{who} said: {text[:40]}", "belief": 1.0,
                       "source_episode_ids": [i], "concepts": ["chat_topic"]}
                      for i, who, text in episodes],
            "concepts": [{"concept_label": "chat_topic",
                          "episode_ids": [i for i, _, _ in episodes]}]})
    assert is_reflection_prompt(prompt), prompt[:120]
    ids = [i for i, _ in FACT.findall(new_section(prompt))]
    return json.dumps({"reflections": [{"reflection_text": REFLECTION, "belief": 0.8,
                                        "source_fact_ids": ids[:2]}]})
