"""Evidence recall@5/10/30 per category on LoCoMo for SYNAPSE, plain dense and plain BM25 retrieval.

Builds each memory over the same turns (SYNAPSE: MiniLM embeddings, LLM-free keyword extractor),
retrieves for all questions in ONE batched call per system and prints the recall table and the time
of each batched call. The last line is the SYNAPSE batched-call time.

    python scripts/recall_locomo.py [--data PATH] [--device cpu|cuda] [--encoder minilm|hashing]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
import torch

from synapse_pt.data import category_names, load_locomo
from synapse_pt.data.source import default_locomo_path
from synapse_pt.eval.aggregate import per_category
from synapse_pt.eval.pipeline import (
    EvalSettings,
    prediction_frame,
    retrieval_summary,
    retrieve_all,
)
from synapse_pt.graph.extraction import KeywordConceptExtractor
from synapse_pt.memory.baselines import BM25Memory, VectorRAG
from synapse_pt.memory.synapse import SynapseMemory
from synapse_pt.models.hashing import HashingEncoder

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=default_locomo_path())
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--encoder", default="minilm", choices=["minilm", "hashing"])
    parser.add_argument("--cache-dir", default=str(REPO / ".cache" / "embeddings"))
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    dataset = load_locomo(args.data)
    if args.encoder == "minilm":
        from synapse_pt.models.embedder import HFEmbedder

        encoder = HFEmbedder(device=args.device, cache_dir=args.cache_dir)
    else:
        encoder = HashingEncoder()
    systems = {
        "synapse": SynapseMemory(encoder, KeywordConceptExtractor(encoder), device=args.device),
        "dense": VectorRAG(encoder, k=30, device=args.device),
        "bm25": BM25Memory(k=30, device=args.device),
    }
    names = category_names("official")
    questions = list(dataset.questions())
    settings = EvalSettings(mode="retrieval")
    frames, rows = [], []
    for label, memory in systems.items():
        start = time.perf_counter()
        memory.ingest(dataset.conversations)
        ingest_s = time.perf_counter() - start
        retrieve_all(memory, questions[:8])  # warm-up (lazy model loading, kernels)
        # one batched call for every question (the memory sees blinded copies: no labels)
        result, retrieve_s = retrieve_all(memory, questions)
        df = prediction_frame(questions, result, [0] * len(questions), None, settings)
        table = per_category(df, ["recall@5", "recall@10", "recall@30"], names)
        summary = retrieval_summary(df)
        means = table.xs("mean", axis=1, level=1)
        means.insert(0, "system", label)
        frames.append(means)
        rows.append({"system": label, "ingest_s": ingest_s, "batched_retrieve_s": retrieve_s,
                     "questions": len(questions),
                     "true_rejection": summary["true_rejection_rate"],
                     "false_rejection": summary["false_rejection_rate"],
                     "c_ret_auc": summary["c_ret_auc_adversarial"]})
    pd.set_option("display.width", 160)
    pd.set_option("display.float_format", lambda v: f"{v:.3f}")
    table = (pd.concat(frames).reset_index().rename(columns={"index": "category"})
             .pivot(index="category", columns="system"))
    print(table.to_string())
    timing = pd.DataFrame(rows).set_index("system")
    print(timing.to_string())
    print(f"synapse_batched_retrieval_s: {timing.loc['synapse', 'batched_retrieve_s']:.3f} s")


if __name__ == "__main__":
    main()
