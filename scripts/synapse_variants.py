"""Retrieval-level effect of SYNAPSE's scoring choices on LoCoMo (one graph build, many variants).

Builds the SYNAPSE memory of all ten conversations once (MiniLM, LLM-free keyword extractor), then
retrieves for all 1,986 questions under each variant of the retrieval hyperparameters and prints
evidence recall@5/10/30 over categories 1-4, the mean number of concept nodes in the top 10, and the
gate's figures (false rejection on 1-4, true rejection on 5, ROC AUC of C_ret). The last line is the
recall@10 of the paper's defaults.

    python scripts/synapse_variants.py [--data PATH] [--device cpu] [--threads 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import torch

from synapse_pt.data import load_locomo
from synapse_pt.data.source import default_locomo_path
from synapse_pt.eval.pipeline import (
    EvalSettings,
    prediction_frame,
    retrieval_summary,
    retrieve_all,
)
from synapse_pt.graph.extraction import KeywordConceptExtractor
from synapse_pt.memory.synapse import SynapseMemory
from synapse_pt.models.embedder import HFEmbedder

REPO = Path(__file__).resolve().parents[1]

VARIANTS: dict[str, dict] = {
    "paper defaults": {},
    "lambda3=0 (no PageRank)": {"lambda3": 0.0},
    "lambda2=0 (no activation in score)": {"lambda2": 0.0},
    "T=0 (no propagation)": {"T": 0},
    "fire_zero=true": {"fire_zero": True},
    "rank_episodic_only": {"rank_episodic_only": True},
    "rank_episodic_only, lambda2=lambda3=0 (cosine)": {"rank_episodic_only": True,
                                                       "lambda2": 0.0, "lambda3": 0.0},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=default_locomo_path())
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--cache-dir", default=str(REPO / ".cache" / "embeddings"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    dataset = load_locomo(args.data)
    encoder = HFEmbedder(device=args.device, cache_dir=args.cache_dir)
    memory = SynapseMemory(encoder, KeywordConceptExtractor(encoder), device=args.device)
    start = time.perf_counter()
    memory.ingest(dataset.conversations)
    print(f"ingest: {time.perf_counter() - start:.1f} s, {memory.batch.num_nodes} nodes, "
          f"{memory.batch.num_edges} edges")
    questions = list(dataset.questions())
    base = memory.params
    header = (f"{'variant':48s} {'R@5':>6s} {'R@10':>6s} {'R@30':>6s} {'concepts@10':>11s} "
              f"{'FR(1-4)':>8s} {'TR(5)':>6s} {'AUC':>6s} {'s':>6s}")
    print(header)
    default_r10 = float("nan")
    for label, change in VARIANTS.items():
        memory.params = dataclasses.replace(base, **change)
        result, seconds = retrieve_all(memory, questions)  # blinded copies: no labels
        df = prediction_frame(questions, result, [0] * len(questions), None, EvalSettings())
        answerable = df[df["category"] < 5]
        summary = retrieval_summary(df)
        concepts = sum(it.kind == "semantic" for row in result.items for it in row[:10])
        r = {k: answerable[f"recall@{k}"].mean() for k in (5, 10, 30)}
        print(f"{label:48s} {r[5]:6.3f} {r[10]:6.3f} {r[30]:6.3f} "
              f"{concepts / len(questions):11.1f} {summary['false_rejection_rate']:8.3f} "
              f"{summary['true_rejection_rate']:6.3f} {summary['c_ret_auc_adversarial']:6.3f} "
              f"{seconds:6.2f}")
        if not change:
            default_r10 = r[10]
    print(f"synapse_recall_at_10_q_1_4: {default_r10:.4f} fraction")


if __name__ == "__main__":
    main()
