"""How well candidate rejection signals separate LoCoMo's adversarial questions (issue 14, first
study): ROC AUC of category 5 against categories 1-4 on all questions, for the fused retriever's
top score, the speaker share of its top-k turns (ranked without the speaker prior) and the swap
contrast over pronoun-resolved turns (:mod:`synapse_pt.retrieval.gate_signals`). Nothing is tuned
(each signal is read as is, low = reject), so no folds are needed.

    python scripts/gate_signals.py [--k 10] [overrides...]

The last line is the best signal's AUC.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence

import hydra
import torch

from synapse_pt.eval.pipeline import blind
from synapse_pt.eval.scorers.retrieval import rejection_auc
from synapse_pt.eval.study import compose_variant
from synapse_pt.retrieval.dense import masked_topk, own_graph_mask
from synapse_pt.retrieval.fusion import fuse
from synapse_pt.retrieval.gate_signals import speaker_share, swap_contrast
from synapse_pt.retrieval.text import named_speaker, swap_speakers
from synapse_pt.run import build_dataset, build_memory


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("overrides", nargs="*", default=[])
    args = parser.parse_args(argv)
    cfg = compose_variant(["memory=fused", *args.overrides, "paths.output_dir=/tmp/gate_signals"])
    dataset = build_dataset(cfg.dataset, refuse_fallback="a gate study")
    encoder = hydra.utils.instantiate(cfg.embedder, _convert_="all")
    memory = build_memory(cfg.memory, encoder=encoder)
    memory.ingest(dataset.conversations)
    questions = list(dataset.questions())
    blinded = [blind(q) for q in questions]
    category = torch.tensor([q.category for q in questions])
    qg = memory.registry.graph_ids(blinded, memory.device)
    mask = own_graph_mask(memory.node_graph, qg)
    with torch.no_grad():
        sig = memory.signals(blinded, qg)
        weights = dict(memory.weights)
        fused = fuse(sig, weights, mask, prev=memory.prev, nxt=memory.next, rho=memory.rho)
        no_prior = fuse(sig, {**weights, "speaker": 0.0}, mask, prev=memory.prev,
                        nxt=memory.next, rho=memory.rho)
        top_score, top_index = masked_topk(no_prior, mask, args.k)
        speakers = [memory.registry.speakers(q.sample_id) for q in blinded]
        named = torch.tensor([named_speaker(q.question, s) for q, s in zip(blinded, speakers,
                                                                            strict=True)])
        share = speaker_share(top_index.T, torch.isfinite(top_score).T, memory.node_speaker,
                              named)
        swapped = [dataclasses.replace(q, question=swap_speakers(q.question, s))
                   for q, s in zip(blinded, speakers, strict=True)]
        asked_sim = sig["dense_resolved"]
        swapped_sim = memory.signals(swapped, qg, ["dense_resolved"])["dense_resolved"]
        contrast = swap_contrast(asked_sim, swapped_sim, mask)
    rows = {"fused top score (C_ret of memory=fused)": fused.amax(dim=0),
            f"speaker share of the top {args.k} (no prior)": share,
            "swap contrast (pronoun-resolved)": contrast}
    named_q = named >= 0
    print(f"{int(named_q.sum())} of {len(questions)} questions name one speaker "
          f"({int((named_q & (category == 5)).sum())} of {int((category == 5).sum())} adversarial)")
    print("| signal | AUC, all questions | AUC, questions naming one speaker |")
    print("| --- | ---: | ---: |")
    best = 0.0
    for name, values in rows.items():
        values = values.double()
        finite = torch.isfinite(values)
        # rejection_auc: how well LOW values flag category 5
        auc_all = rejection_auc(torch.nan_to_num(values, nan=float(values[finite].median())),
                                category)
        auc_named = rejection_auc(values[named_q & finite], category[named_q & finite])
        best = max(best, auc_all, auc_named)
        print(f"| {name} | {auc_all:.3f} | {auc_named:.3f} |")
    print(f"best_gate_signal_auc: {best:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
