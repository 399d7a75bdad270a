"""GAAMA's and Membox's LLM build paths as their code runs them, written for the tests from the
upstream sources (gaama 2d992f7: ``evals/locomo/run_create_ltm.py``, ``services/orchestrator.py``,
``services/ltm_creator.py``, ``services/llm_extractors.py``, ``adapters/sqlite_vector.py``,
``adapters/sqlite_memory.py``; Membox 3d1fa84: ``membox.py`` ``MemoryBuilder``,
``TopicClusterManager``, ``TraceLinker``) and from experiments/related_llm_builds.md, which
describes them; a plain reference that shares no code with ``synapse_pt.memory``. It reads the
prompt templates from the upstream files (by text, never pasted here) and asks a ``reply``
function, recording every request.

Where the code is not deterministic the reference takes the project's stated forms: episode ids
``ep-`` + 16 hex digits of the sha256 of ``"<sample>|<dia_id>"`` (the code draws them at random),
and a set of event texts iterated in the order a Python set has under a fixed string hash (the
sha256's first 8 bytes; the code's is salted per process).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from upstream_files import ROOT, membox_template

from synapse_pt.data.schema import Dialogue

Reply = Callable[[str], str]


def _cosines(encode: Callable[[list[str]], torch.Tensor], query: str,
             texts: Sequence[str]) -> list[float]:
    if not texts:
        return []
    q = encode([query])[0].double()
    rows = encode(list(texts)).double()
    return (rows @ q).float().tolist()


# ================================================================================ GAAMA

def canonical_id(text: str) -> str:
    """infra/id_helpers.py canonical_id_entity(text, [])."""
    norm = " ".join(str(text).strip().lower().split())
    return "entity-" + hashlib.sha256(f"entity|{norm}".encode()).hexdigest()[:16]


def episode_node_id(sample_id: str, dia_id: str) -> str:
    return "ep-" + hashlib.sha256(f"{sample_id}|{dia_id}".encode()).hexdigest()[:16]


def _literals(block: str) -> str:
    parts = re.findall(r'f?"((?:[^"\\]|\\.)*)"', block)
    return "".join(p.encode().decode("unicode_escape") for p in parts)


@dataclass
class GaamaTexts:
    """The prompt files and the retry texts of llm_extractors.py, cut from their text."""

    fact: str
    reflection: str
    retry: str
    hint: str
    first_error: dict[str, str]
    empty_error: str
    not_dict_error: str

    @classmethod
    def read(cls) -> GaamaTexts:
        prompts = ROOT / "gaama" / "prompts"
        src = (ROOT / "gaama" / "services" / "llm_extractors.py").read_text()
        first = re.findall(r'_retry_llm_for_json\(\s*self\._llm, raw or "", "([^"]*)"', src)
        fixed = re.findall(r'last_error = "([^"]*)"', src)
        return cls((prompts / "fact_generation.md").read_text(),
                   (prompts / "reflection_generation.md").read_text(),
                   _literals(src.split("retry_prompt = (")[1].split("\n        )\n")[0]),
                   _literals(src.split("keys_hint = (")[1].split("\n        )\n")[0]),
                   {"facts": first[0], "reflections": first[1]}, fixed[0], fixed[1])

    def retry_prompt(self, error: str, raw: str, keys: list[str]) -> str:
        return (self.retry.replace("{last_error}", error)
                .replace("{(last_raw or '')[:1000]}", raw[:1000])
                .replace("{keys_hint}", self.hint.replace("{expected_keys}", str(keys))))


def budget_truncate(sections: list[tuple[list[str], float]], max_words: int) -> list[list[str]]:
    """llm_extractors.py 113-158: each section its share first, then what is left, in order."""
    selected: list[list[str]] = []
    remaining = max_words
    for lines, share in sections:
        budget, used, kept = int(max_words * share), 0, []
        for line in lines:
            wc = len(line.split())
            if used + wc > budget:
                break
            kept.append(line)
            used += wc
        remaining -= used
        selected.append(kept)
    for (lines, _), kept in zip(sections, selected, strict=True):
        for line in lines[len(kept):]:
            wc = len(line.split())
            if remaining < wc:
                break
            kept.append(line)
            remaining -= wc
    return selected


def strip_json_block(text: str) -> str:
    """llm_extractors.py 22-29."""
    text = text.strip()
    m = re.search(r"^```(?:json)?\s*\n?(.*?)\n?```\s*$", text, re.DOTALL)
    return m.group(1).strip() if m else text


@dataclass
class GaamaNode:
    kind: str
    text: str


@dataclass
class GaamaBuild:
    """What the code's path made: requests ``(prompt, max_tokens)`` in order, nodes by id, edges
    ``(source id, target id, type)`` in the order made."""

    requests: list[tuple[str, int]] = field(default_factory=list)
    nodes: dict[str, GaamaNode] = field(default_factory=dict)
    edges: list[tuple[str, str, str]] = field(default_factory=list)
    fallbacks: int = 0  # requests whose retries all failed (nothing extracted)


class GaamaCodePath:
    """LTMCreator.create_from_events for each chunk of each conversation, into one store."""

    def __init__(self, reply: Reply, encode: Callable[[list[str]], torch.Tensor], *,
                 chunk_tokens: int = 500, threshold: float = 0.75) -> None:
        self.reply, self.encode = reply, encode
        self.chunk_tokens, self.threshold = chunk_tokens, threshold
        self.texts = GaamaTexts.read()
        self.out = GaamaBuild()
        self.rows: list[tuple[str, str, str]] = []  # (entity id, conversation, embedded text)
        self.dates: dict[str, str] = {}  # an episode's session_date tag

    # the store (adapters/sqlite_vector.py)
    def upsert(self, conv: str, items: Sequence[tuple[str, str]]) -> None:
        for node_id, text in items:
            self.rows = [r for r in self.rows if r[0] != node_id]
            self.rows.append((node_id, conv, text))

    def search(self, conv: str, query: str, top_k: int) -> list[tuple[str, float]]:
        cos = _cosines(self.encode, query, [t for _, _, t in self.rows])
        dist = [1.0 - c for c in cos]
        order = sorted(range(len(self.rows)), key=lambda i: dist[i])[:max(top_k * 2, 20)]
        best: dict[str, float] = {}
        for i in order:
            node_id, owner, _ = self.rows[i]
            if owner == conv and (node_id not in best or dist[i] < best[node_id]):
                best[node_id] = dist[i]
        ranked = sorted(best.items(), key=lambda x: x[1])[:top_k]
        return [(n, max(0.0, 1.0 - d / 2.0)) for n, d in ranked]

    def ask(self, prompt: str, max_tokens: int) -> str:
        self.out.requests.append((prompt, max_tokens))
        return (self.reply(prompt) or "").strip()  # adapters/openai_llm.py 62

    def parse(self, raw: str, kind: str, max_tokens: int) -> dict[str, Any]:
        """_parse_response and _retry_llm_for_json."""
        keys = ["facts", "concepts"] if kind == "facts" else ["reflections"]
        stripped = strip_json_block(raw)
        if not stripped:
            return {k: [] for k in keys}
        try:
            data = json.loads(stripped)
            if isinstance(data, dict):
                return data
        except json.JSONDecodeError:
            pass
        error, last = self.texts.first_error[kind], raw
        for _ in range(2):
            got = self.ask(self.texts.retry_prompt(error, last, keys), max_tokens)
            stripped = strip_json_block(got)
            if not stripped:
                error, last = self.texts.empty_error, got
                continue
            try:
                data = json.loads(stripped)
                if isinstance(data, dict) and data:
                    return data
                error, last = self.texts.not_dict_error, got
            except json.JSONDecodeError as exc:
                error, last = str(exc), got
        self.out.fallbacks += 1
        return {k: [] for k in keys}

    def edge(self, a: str, b: str, kind: str) -> None:
        self.out.edges.append((a, b, kind))

    def kind(self, node_id: str) -> str:
        return self.out.nodes[node_id].kind

    def build(self, dialogues: Sequence[Dialogue]) -> GaamaBuild:
        for d in dialogues:
            self.conversation(d)
        return self.out

    def conversation(self, d: Dialogue) -> None:
        events = []  # run_create_ltm.py _session_to_events
        for s in d.sessions:
            for t in s.turns:
                date = s.date_time_raw or ""
                content = f"[{date}] {t.speaker}: {t.text}" if date else f"{t.speaker}: {t.text}"
                events.append((episode_node_id(d.sample_id, t.dia_id), t.speaker, content, date))
        chunks, current, tokens = [], [], 0  # orchestrator.py 139-162
        for e in events:
            tok = max(1, len((e[1] + " " + e[2]).split()))
            if tokens + tok > self.chunk_tokens and current:
                chunks.append(current)
                current, tokens = [], 0
            current.append(e)
            tokens += tok
        if current:
            chunks.append(current)
        last = None
        for chunk in chunks:
            last = self.chunk(d.sample_id, chunk, last)

    def chunk(self, conv: str, chunk: list[tuple[str, str, str, str]], last: str | None
              ) -> str:
        out, thr = self.out, self.threshold
        for node_id, _, content, date in chunk:
            out.nodes[node_id] = GaamaNode("episode", content)
            self.dates[node_id] = date
        self.upsert(conv, [(n, c) for n, _, c, _ in chunk])
        if last is not None:
            self.edge(last, chunk[0][0], "NEXT")
        for a, b in zip(chunk, chunk[1:], strict=False):
            self.edge(a[0], b[0], "NEXT")
        ids = [n for n, _, _, _ in chunk]
        # step 2a (ltm_creator.py 237-297)
        related, seen = [], set(ids)
        for _, _, content, _ in chunk:
            for n, sim in self.search(conv, content, 10):
                if n not in seen and self.kind(n) == "episode" and sim >= thr:
                    related.append(n)
                    seen.add(n)
        facts = set()
        for a, b, t in out.edges:
            if t == "DERIVED_FROM" and (a in related or b in related):
                facts.update((a, b))
        facts = sorted(n for n in facts if self.kind(n) == "fact")
        concepts, cseen = [], set()
        for _, _, content, _ in chunk:
            for n, sim in self.search(conv, content, 5):
                if n not in cseen and self.kind(n) == "concept" and sim >= thr:
                    concepts.append(n)
                    cseen.add(n)
        def ep_line(n: str) -> str:  # llm_extractors.py 174-184
            return f"[{n}] [{self.dates[n]}] {out.nodes[n].text.strip()}"

        sections = budget_truncate([([ep_line(n) for n in ids], 0.35),
                                    ([ep_line(n) for n in related], 0.25),
                                    ([f"[{n}] {out.nodes[n].text}" for n in facts], 0.25),
                                    ([out.nodes[n].text for n in concepts], 0.15)], 2000)
        filled = [("\n".join(s) if s else "(none)") for s in sections]
        prompt = self.texts.fact
        for key, value in zip(("new_episodes", "related_episodes", "existing_facts",
                               "existing_concepts"), filled, strict=True):
            prompt = prompt.replace("{{" + key + "}}", value)
        data = self.parse(self.ask(prompt, 8000), "facts", 8000)
        raw_facts, raw_concepts = data.get("facts", []), data.get("concepts", [])
        # step 2c (ltm_creator.py 310-409)
        label_to = {out.nodes[n].text.strip().lower(): n for n in concepts}
        new_concepts = []
        for item in raw_concepts or []:
            label = str(item.get("concept_label", "")).strip().lower()
            if not label:
                continue
            if label not in label_to:
                node_id = canonical_id(label)
                out.nodes[node_id] = GaamaNode("concept", label)
                new_concepts.append((node_id, label))
                label_to[label] = node_id
            for e in item.get("episode_ids", []):
                if e in ids:
                    self.edge(e, label_to[label], "HAS_CONCEPT")
        self.upsert(conv, new_concepts)
        new_facts = []
        for item in raw_facts or []:
            text = str(item.get("fact_text", "")).strip()
            if not text:
                continue
            node_id = canonical_id(text)
            out.nodes[node_id] = GaamaNode("fact", text)
            new_facts.append((node_id, text))
            for e in item.get("source_episode_ids", []):
                if e in ids:
                    self.edge(node_id, e, "DERIVED_FROM")
            for c in item.get("concepts", []):
                target = label_to.get(str(c).strip().lower())
                if target:
                    self.edge(node_id, target, "ABOUT_CONCEPT")
        self.upsert(conv, new_facts)
        if new_facts:
            self.reflect(conv, new_facts)
        return chunk[-1][0]

    def reflect(self, conv: str, new_facts: list[tuple[str, str]]) -> None:
        out, thr = self.out, self.threshold
        seen = {n for n, _ in new_facts}
        related = []
        for _, text in new_facts:  # ltm_creator.py 428-446
            for n, sim in self.search(conv, text, 5):
                if n not in seen and self.kind(n) == "fact" and sim >= thr:
                    related.append(n)
                    seen.add(n)
        fact_ids = [n for n, _ in new_facts] + related
        drawn = set()
        for a, b, t in out.edges:
            if t == "DERIVED_FROM_FACT" and (a in fact_ids or b in fact_ids):
                drawn.update((a, b))
        drawn = sorted(n for n in drawn if self.kind(n) == "reflection")
        sections = budget_truncate([([f"[{n}] {t}" for n, t in new_facts], 0.40),
                                    ([f"[{n}] {out.nodes[n].text}" for n in related], 0.30),
                                    ([f"[{n}] {out.nodes[n].text}" for n in drawn], 0.30)], 2000)
        prompt = self.texts.reflection
        for key, s in zip(("new_facts", "related_facts", "existing_reflections"), sections,
                          strict=True):
            prompt = prompt.replace("{{" + key + "}}", "\n".join(s) if s else "(none)")
        data = self.parse(self.ask(prompt, 4000), "reflections", 4000)
        made = []
        new_ids = {n for n, _ in new_facts}
        for item in data.get("reflections", []) or []:  # ltm_creator.py 481-518
            text = str(item.get("reflection_text", "")).strip()
            if not text:
                continue
            node_id = canonical_id(text)
            out.nodes[node_id] = GaamaNode("reflection", text)
            made.append((node_id, text))
            for f in item.get("source_fact_ids", []):
                if f in new_ids:
                    self.edge(node_id, f, "DERIVED_FROM_FACT")
        self.upsert(conv, made)


# ================================================================================ Membox

def fixed_set_order(texts: Sequence[str]) -> list[str]:
    """A Python set of ``texts`` iterated, its string hash fixed (module docstring)."""

    class Key(str):
        def __hash__(self) -> int:
            return int.from_bytes(hashlib.sha256(self.encode()).digest()[:8], "big",
                                  signed=True)

    return [str(k) for k in {Key(t) for t in texts}]


@dataclass
class MemboxBox:
    turns: list[str]  # dia_ids
    content: str
    topic: str
    keywords: str  # the code's keywords text
    events: list[str]
    events_text: str


@dataclass
class MemboxBuild:
    """Requests ``(kind, prompt, json mode)`` in order, the boxes, and the traces as ``(box ids,
    entries: [(box id, event texts)])``."""

    requests: list[tuple[str, str, bool]] = field(default_factory=list)
    boxes: list[MemboxBox] = field(default_factory=list)
    traces: list[tuple[list[int], list[tuple[int, list[str]]]]] = field(default_factory=list)


class MemboxCodePath:
    """MemoryBuilder.build_all then TraceLinker.run for one conversation (membox.py 532-1030)."""

    def __init__(self, reply: Reply, encode: Callable[[list[str]], torch.Tensor], *,
                 threshold: float = 0.5) -> None:
        self.reply, self.encode, self.threshold = reply, encode, threshold
        self.t = {k: membox_template(n) for k, n in (
            ("loom", "PROMPT_MSG_CONTINUATION"), ("box", "PROMPT_DIALOG_EXTRACT"),
            ("verify", "PROMPT_TRACE_EVENT_FILTER"), ("chains", "PROMPT_TRACE_INIT"))}
        self.out = MemboxBuild()

    def chat(self, kind: str, prompt: str, json_mode: bool = False) -> str:
        """LLMWorker.chat_completion (439-455): the content stripped, "" (or "{}") for none."""
        self.out.requests.append((kind, prompt, json_mode))
        return (self.reply(prompt) or "").strip()

    def build(self, d: Dialogue) -> MemboxBuild:
        msgs: list[dict] = []

        def seal() -> None:
            if not msgs:
                return
            start = msgs[0]["time"]
            content = "\n".join([f"Start: {start}"] + [f"{m['time']} {m['role']}: {m['text']}"
                                                       for m in msgs])
            raw = self.chat("box", self.t["box"].format(text=content), json_mode=True)
            topic, keywords, events, events_text = "", "", [], ""
            try:  # process_new_box 480-499
                data = json.loads(raw)
                topic = str(data.get("topic", "") or "").strip()
                kws = data.get("keywords", [])
                keywords = (", ".join(str(k).strip() for k in kws if str(k).strip())
                            if isinstance(kws, list) else str(kws).strip())
                evs = data.get("explicit_mentions", [])
                if isinstance(evs, list):
                    events = [str(e).strip() for e in evs if str(e).strip()]
                    events_text = " | ".join(events)
                else:
                    events_text = str(evs).strip()
            except Exception:
                pass
            self.out.boxes.append(MemboxBox([m["dia"] for m in msgs], content, topic, keywords,
                                            events, events_text))
            msgs.clear()

        for s in d.sessions:  # build_all, _process (586-630)
            for t in s.turns:
                msg = {"role": t.speaker, "text": t.text.strip(), "time": s.date_time_raw,
                       "session": s.index, "dia": t.dia_id}
                if not msgs:
                    msgs.append(msg)
                elif msgs[-1]["session"] != s.index:
                    seal()
                    msgs.append(msg)
                elif len(msgs) == 1:
                    msgs.append(msg)
                else:
                    prev = [f"{m['role']}: {m['text']}" for m in msgs[-2:]]
                    res = self.chat("loom", self.t["loom"].format(
                        ref="\n".join(prev), curr=f"{msg['role']}: {msg['text']}"))
                    if "yes" in res.lower():
                        msgs.append(msg)
                    else:
                        seal()
                        msgs.append(msg)
        seal()
        self.weave()
        return self.out

    def weave(self) -> None:
        """TraceLinker.run (851-984)."""
        traces = self.out.traces
        starts = [b.content.split("\n")[0].removeprefix("Start: ") for b in self.out.boxes]

        def lines(trace) -> list[str]:
            return [f"{starts[b]}: {e}" for b, evs in trace[1] for e in evs]

        for bid, box in enumerate(self.out.boxes):
            events = [e for e in box.events if e]
            if not events:
                continue
            selected = set()
            for ev in events:
                best_id, best = None, -1.0
                for tid, trace in enumerate(traces):
                    tevs = [e for _, evs in trace[1] for e in evs]
                    cos = _cosines(self.encode, ev, tevs)
                    trace_best = max([-1.0, *cos])
                    if trace_best > best:
                        best, best_id = trace_best, tid
                if best_id is not None and best >= self.threshold:
                    selected.add(best_id)
            matched = set()
            for tid in selected:  # a set of trace ids, iterated as the code's
                trace = traces[tid]
                res = self.chat("verify", self.t["verify"].format(
                    content_a="\n".join(lines(trace)) or "None",
                    content_b="\n".join(events) or "None"))
                related: list[str] = []
                unrelated = False
                try:
                    parsed = json.loads(res)
                    named = parsed.get("related_events") or []
                    other = parsed.get("unrelated_events") or []
                    for ev in events:
                        if ev in named:
                            related.append(ev)
                        elif ev in other:
                            unrelated = True
                except Exception:
                    related = list(events)
                if not related and not unrelated:
                    related = list(events)
                related = fixed_set_order(related)
                if related:
                    if bid not in trace[0]:
                        trace[0].append(bid)
                    trace[1].append((bid, related))
                    matched.update(related)
            unmatched = [e for e in events if e not in matched]
            if not unmatched:
                continue

            def create(ev_list, bid: int = bid) -> None:
                clean = [str(e).strip() for e in ev_list if str(e).strip()]
                if clean:
                    traces.append(([bid], [(bid, clean)]))

            if len(unmatched) == 1:
                create(unmatched)
                continue
            res = self.chat("chains", self.t["chains"].format(events="\n".join(unmatched)))
            try:
                init = json.loads(res)
            except Exception:
                init = {}
            init = init or {}
            primary = init.get("primary_chain") or []
            secondary = init.get("secondary_chains") or []
            isolated = init.get("isolated_events") or []
            chains = ([primary] if primary else []) + [c for c in secondary if c]
            if not chains and isolated:
                chains.append(isolated)
            for c in chains:
                create(c)
            if chains and isolated:
                used = {e for c in chains for e in c}
                for e in isolated:
                    if e not in used:
                        create([e])
