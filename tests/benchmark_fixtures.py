"""Small REALTALK and BEAM files written in each upstream format (records worked out by hand),
shared by the adapter tests and the end-to-end judge tests."""

from __future__ import annotations

import json
from pathlib import Path


def _message(text, speaker, when, dia_id, caption=None):
    msg = {"clean_text": text, "speaker": speaker, "date_time": when, "img_file": [],
           "img_url": [], "dia_id": dia_id}
    if caption:
        msg["blip_caption"] = caption
    return msg


def realtalk_fixture(folder: Path) -> Path:
    """Two sessions; the day block D2 continues in session 3 (as in five upstream files); D2:2 was
    removed (a gap); one message carries an image; two messages share a time."""
    chat = {
        "name": {"speaker_1": "Ann", "speaker_2": "bob"},
        "session_1": [_message("hi", "Ann", "01.01.2024, 10:00:00", "D1:1"),
                      _message("hello", "bob", "01.01.2024, 10:00:00", "D1:2"),
                      _message("look", "Ann", "01.01.2024, 10:05:00", "D1:3", "a dog")],
        "session_1_date_time": "01.01.2024, 10:00:00",
        "events_session_1": {"agent_a": [{"sub-event": "x", "date": "", "id": "E"}]},
        "session_2": [_message("back", "bob", "02.01.2024, 09:00:00", "D2:1")],
        "session_2_date_time": "02.01.2024, 09:00:00",
        "session_3": [_message("again", "Ann", "03.01.2024, 08:00:00", "D2:3")],
        "session_3_date_time": "03.01.2024, 08:00:00",
        "qa": [
            {"question": "q0?", "answer": "a", "evidence": ["D1:1; D2:1", "D1:3."],
             "category": 1},
            {"question": "q1?", "answer": "b", "evidence": ["D1:1-D1:3", "D2:2", ""],
             "category": 2},
            {"question": "q2?", "answer": "c", "evidence": [], "category": 3},
        ],
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "Chat_1_Ann_bob.json"
    path.write_text(json.dumps(chat))
    return path


def _batch(number, messages, anchor):
    turns = [[m] for m in messages]
    turns[0][0]["time_anchor"] = anchor
    return {"batch_number": number, "time_anchor": None, "turns": turns}


def beam_fixture(root: Path, truncated: bool = False) -> Path:
    """One conversation of two batches; three questions whose evidence comes as a list, nested
    lists and a dict; an abstention question without evidence."""
    conv = root / "100K" / "1"
    (conv / "probing_questions").mkdir(parents=True, exist_ok=True)
    msgs = [{"role": r, "id": i, "content": f"m{i}"}
            for i, r in enumerate(["user", "assistant", "user", "assistant", "user", "assistant"])]
    chat = [_batch(1, msgs[:4], "March-15-2024"), _batch(2, msgs[4:], "April-01-2024")]
    (conv / "chat.json").write_text(json.dumps(chat))
    if truncated:
        (conv / "chat_trunecated.json").write_text(json.dumps(chat[:1]))
    probing = {
        "abstention": [{"question": "a?", "ideal_response": "no info", "rubric": ["say none"]}],
        "event_ordering": [{"question": "order?", "answer": "1, 2",
                            "rubric": ["first", "second"], "source_chat_ids": [0, [2, 3]]}],
        "knowledge_update": [{"question": "now?", "answer": "new",
                              "rubric": ["state: new"],
                              "source_chat_ids": {"original_info": [2], "updated_info": [4]}}],
    }
    (conv / "probing_questions" / "probing_questions.json").write_text(json.dumps(probing))
    return root / "100K"
