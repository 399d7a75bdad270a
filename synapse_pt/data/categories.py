"""LoCoMo question categories.

The data stores a raw category number. The official LoCoMo evaluation code routes them as
1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial (SPEC §3). Other projects
(A-Mem and the papers that copy its tables) label the same numbers differently. We always keep the
raw number and treat the names as a config mapping.

A preset is ``official`` or a benchmark's format (``realtalk``, ``beam``): the categories it
declares (:mod:`synapse_pt.data.benchmark`). An ``amem`` preset (2 multi-hop, 3 temporal), the
labelling of A-Mem's paper tables, was removed: A-Mem's own evaluation code gives raw category 2
the temporal date prompt ("Use DATE of CONVERSATION to answer with an approximate date",
``WujiangXu/AgenticMemory`` ``test_advanced.py``, ``answer_question``), exactly as the official
generation code does (``snap-research/locomo`` branch ``code``, ``task_eval/evaluate_gpts.py``:
``if qa['category'] == 2``). No code behind that labelling exists, so a table relabelled by it
would move numbers into columns nobody measured them in. An explicit ``{number: name}`` mapping
stays possible for other projects' labels.
"""

from __future__ import annotations

from collections.abc import Mapping

from synapse_pt.common.errors import ConfigError

OFFICIAL: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

#: REALTALK numbers its categories as LoCoMo does (its authors' scorer routes them alike); no 4, 5
REALTALK = {1: "multi-hop", 2: "temporal", 3: "open-domain"}
#: BEAM's ten memory abilities, numbered in the order of its probing-question files
BEAM = {1: "abstention", 2: "contradiction_resolution", 3: "event_ordering",
        4: "information_extraction", 5: "instruction_following", 6: "knowledge_update",
        7: "multi_session_reasoning", 8: "preference_following", 9: "summarization",
        10: "temporal_reasoning"}

_REMOVED = {
    "amem": "the 'amem' preset was removed: A-Mem's code routes raw category 2 as temporal (its "
            "date prompt), as the official code does (see synapse_pt/data/categories.py); use "
            "'official' or an explicit {number: name} mapping",
}

ADVERSARIAL = 5  # raw number of the unanswerable category in the official release
ANSWERABLE = (1, 2, 3, 4)


def category_names(preset_or_mapping: str | Mapping[int | str, str] = "official") -> dict[int, str]:
    """Return a ``{raw number: name}`` mapping from a preset name (``official`` or a benchmark's
    format) or an explicit mapping.

    Explicit mappings may come from YAML with string keys; they are converted to ``int``.
    """
    if not isinstance(preset_or_mapping, str):
        return {int(k): str(v) for k, v in preset_or_mapping.items()}
    if preset_or_mapping in _REMOVED:
        raise KeyError(f"dataset.categories={preset_or_mapping!r}: {_REMOVED[preset_or_mapping]}")
    if preset_or_mapping == "official":
        return dict(OFFICIAL)
    from .benchmark import benchmark, benchmarks  # the benchmarks' loaders import this module

    try:
        return dict(benchmark(preset_or_mapping).categories)
    except ConfigError:
        raise KeyError(f"unknown category preset {preset_or_mapping!r}; choose one of "
                       f"{['official', *sorted(benchmarks())]} or give an explicit "
                       "{number: name} mapping") from None
