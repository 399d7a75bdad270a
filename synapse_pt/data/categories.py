"""LoCoMo question categories.

The data stores a raw category number. The official LoCoMo evaluation code routes them as
1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial (SPEC §3). Other projects
(A-Mem and the papers that copy its tables) label the same numbers differently. We always keep the
raw number and treat the names as a config mapping.
"""

from __future__ import annotations

from collections.abc import Mapping

OFFICIAL: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

# The labelling used by A-Mem and several follow-up papers for the same raw numbers.
AMEM: dict[int, str] = {
    1: "single-hop",
    2: "multi-hop",
    3: "temporal",
    4: "open-domain",
    5: "adversarial",
}

PRESETS: dict[str, dict[int, str]] = {"official": OFFICIAL, "amem": AMEM}

ADVERSARIAL = 5  # raw number of the unanswerable category in the official release
ANSWERABLE = (1, 2, 3, 4)


def category_names(preset_or_mapping: str | Mapping[int | str, str] = "official") -> dict[int, str]:
    """Return a ``{raw number: name}`` mapping from a preset name or an explicit mapping.

    Explicit mappings may come from YAML with string keys; they are converted to ``int``.
    """
    if isinstance(preset_or_mapping, str):
        if preset_or_mapping not in PRESETS:
            raise KeyError(
                f"unknown category preset {preset_or_mapping!r}; choose one of {sorted(PRESETS)} "
                "or give an explicit {number: name} mapping"
            )
        return dict(PRESETS[preset_or_mapping])
    return {int(k): str(v) for k, v in preset_or_mapping.items()}
