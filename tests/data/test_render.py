from __future__ import annotations

from datetime import datetime

import pytest

from synapse_pt.data.render import DEFAULT_TURN_TEMPLATE, TurnRenderer
from synapse_pt.data.schema import Turn

TURN = Turn("conv-1", "D2:7", "Caroline", "Look at this!", 2, 6, datetime(2023, 5, 8, 13, 56),
            blip_caption="a photo of a dog")
PLAIN = Turn("conv-1", "D2:8", "Melanie", "Cute.", 2, 7, datetime(2023, 5, 8, 13, 57))


def test_default_template_carries_the_speaker_and_the_caption() -> None:
    render = TurnRenderer()
    assert render.template == DEFAULT_TURN_TEMPLATE
    assert render(TURN) == "Caroline: Look at this! [shares an image: a photo of a dog]"
    assert render(PLAIN) == "Melanie: Cute."
    assert not render.dated


def test_dated_and_bare_variants() -> None:
    dated = TurnRenderer("[{date}] {speaker}: {text}{caption}")
    assert dated(PLAIN) == "[8 May 2023] Melanie: Cute." and dated.dated
    assert TurnRenderer("{text}{caption}")(TURN) == TURN.content  # the landed code's text
    assert TurnRenderer("{dia_id} {text}").render([PLAIN, PLAIN]) == ["D2:8 Cute."] * 2


@pytest.mark.parametrize("template, message", [
    ("{speaker}: {utterance}", "unknown field"),
    ("{speaker}", "must contain {text}"),
    ("{text", "not a valid format string"),
    ("{0} {text}", "unknown field"),
])
def test_bad_templates_name_the_config_key(template: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        TurnRenderer(template)
    assert "turn_template" in str(err.value)
