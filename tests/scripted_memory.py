"""A scripted chat model that answers GAAMA's and Membox's extraction prompts the way a chat
model would (shared by the memory tests and the loopback-server test)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from synapse_pt.models.llm.base import LLM, ChatRequest, ChatResponse

MESSAGE = re.compile(r"^\[(D\d+:\d+)\] \([^)]*\) ([^:]+): (.*)$", re.MULTILINE)
REFLECTION_REPLY = ('```json\n{"reflections": [{"reflection": "They talk often.", '
                    '"facts": [0, 1]}]}\n```')


def scripted_reply(prompt: str, garble: str | None = None) -> str:
    """The reply to one prompt (the original user message of a request)."""
    if garble and garble in prompt:
        return "Sorry, I can't help with that."
    if "Write the atomic facts" in prompt:
        chunk = prompt.split("Earlier messages")[0]
        msgs = MESSAGE.findall(chunk)
        return json.dumps({
            "facts": [{"fact": f"{who} said: {text[:40]}", "sources": [i],
                       "concepts": ["chat_topic"]} for i, who, text in msgs],
            "message_concepts": {i: ["chat_topic"] for i, _, _ in msgs}})
    if "reflections" in prompt and "Facts about" in prompt:
        return REFLECTION_REPLY
    if "Does the new message continue" in prompt:
        new = prompt.split("New message:")[1]
        return "No." if "?" in new else "Yes, it does."
    if "3-8 keywords" in prompt:
        lines = prompt.split("conversation:\n")[1].split("\n\n")[0].splitlines()
        return json.dumps({"keywords": ["talk", "news", "plans"], "topic": "catching up",
                           "events": [line[:50] for line in lines]})
    if "Which new events continue this storyline" in prompt:
        n = len(re.findall(r"^\d+\. ", prompt.split("New events, numbered:")[1], re.MULTILINE))
        return json.dumps({"related": [0], "unrelated": list(range(1, n))})
    if "Group them into storylines" in prompt:
        n = len(re.findall(r"^\d+\. ", prompt, re.MULTILINE))
        return json.dumps({"chains": [[0, 1]], "isolated": list(range(2, n))})
    if "Which new events continue which trace?" in prompt:
        trace = int(re.search(r"trace (\d+):", prompt).group(1))
        return json.dumps({"links": [{"event": 0, "trace": trace}]})
    raise AssertionError(f"unexpected prompt: {prompt[:120]}")


class ScriptedLLM(LLM):
    """Answers with :func:`scripted_reply`; garbles the replies for the requests whose prompt
    contains ``garble`` (first reply and repair alike)."""

    backend, model = "scripted", "scripted-memory"

    def __init__(self, garble: str | None = None) -> None:
        self.garble = garble
        self.requests: list[ChatRequest] = []

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        self.requests.extend(requests)
        # route on the original prompt (a repair request appends the bad reply and an instruction)
        return [ChatResponse(scripted_reply(r.messages[1][1], self.garble), prompt_tokens=10,
                             completion_tokens=5, latency_s=0.0, model=self.model)
                for r in requests]

    def count_tokens(self, text: str) -> int:
        return len(text.split())
