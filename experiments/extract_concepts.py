"""What each concept extractor makes of a conversation's windows, side by side.

    python experiments/extract_concepts.py --sample-id conv-26 --extractors keyword keybert yake \
        llm --llm smollm2 --windows 8

For every extractor (a config of ``configs/extractor/``, built as a run builds it) over the
conversation's consolidation windows (N = ``memory.graph.window`` turns): windows, concepts per
window, distinct concepts, extraction failures and seconds, then the concepts of the first
``--windows`` windows in a Markdown table. The last line is the LLM extractor's share of windows
with a valid concept list (or the first extractor's distinct concepts when no LLM runs).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import hydra

from synapse_pt.commands.build import build_extractor, build_llm, composed_config
from synapse_pt.data.resolve import build_dataset
from synapse_pt.graph.consolidation import windows_of
from synapse_pt.graph.extraction import LLMConceptExtractor


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample-id", default="conv-26")
    parser.add_argument("--extractors", nargs="+", default=["keyword", "keybert", "yake"])
    parser.add_argument("--llm", default="smollm2", help="llm config for extractor=llm")
    parser.add_argument("--windows", type=int, default=8, help="windows shown in the table")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    base = [f"dataset.sample_ids=[{args.sample_id}]", f"llm={args.llm}",
            "paths.output_dir=/tmp/extract_concepts", *args.overrides]
    cfg = composed_config(base)
    dataset = build_dataset(cfg.dataset, refuse_fallback="extract_concepts")
    windows = windows_of(list(dataset.conversations[0].turns()), int(cfg.memory.graph.window))
    encoder = hydra.utils.instantiate(cfg.embedder, _convert_="all")
    found: dict[str, list[list[str]]] = {}
    stats = []
    ok_share = None
    for name in args.extractors:
        ecfg = composed_config([*base, f"extractor={name}"])
        if name == "llm":
            ecfg.extractor.on_failure = "skip_window"  # count failures instead of stopping
        llm = build_llm(ecfg.llm) if not ecfg.extractor.llm_free else None
        extractor = build_extractor(ecfg.extractor, encoder, llm)
        t0 = time.perf_counter()
        concepts = extractor.extract(windows)
        seconds = time.perf_counter() - t0
        failed = getattr(extractor, "num_failed_windows", 0)
        if isinstance(extractor, LLMConceptExtractor):
            ok_share = 1 - failed / len(windows)
        label = extractor.name
        found[label] = concepts
        distinct = {c.casefold() for cs in concepts for c in cs}
        stats.append(f"| {label} | {len(windows)} | {sum(map(len, concepts)) / len(windows):.2f} "
                     f"| {len(distinct)} | {failed} | {seconds:.1f} |")
    print(f"## concepts of {args.sample_id} ({len(windows)} windows of "
          f"{cfg.memory.graph.window} turns)\n")
    print("| extractor | windows | concepts/window | distinct | failed windows | seconds |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(stats))
    print("\n| window | " + " | ".join(found) + " |")
    print("| --- |" + " --- |" * len(found))
    for i, w in enumerate(windows[: args.windows]):
        cells = ["; ".join(cs[i]) or "(none)" for cs in found.values()]
        print(f"| {w[0].dia_id}..{w[-1].dia_id} | " + " | ".join(cells) + " |")
    if ok_share is not None:
        print(f"llm_valid_window_share: {ok_share:.3f}")
    else:
        first = next(iter(found.values()))
        print(f"distinct_concepts: {len({c.casefold() for cs in first for c in cs})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
