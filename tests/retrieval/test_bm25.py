"""Batched BM25 (SPEC §1.2 step 1) equals rank_bm25.BM25Okapi, group by group."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from rank_bm25 import BM25Okapi

from synapse_pt.retrieval.bm25 import BM25Index
from synapse_pt.retrieval.tokenize import tokenize

VOCAB = [f"w{i}" for i in range(25)]


def random_corpus(seed, num_docs, max_len=12, vocab=VOCAB):
    rng = random.Random(seed)
    # skewed word choice so that some words sit in more than half of the documents
    # (negative idf -> epsilon floor)
    weights = [1.0 / (k + 1) for k in range(len(vocab))]
    return [rng.choices(vocab, weights, k=rng.randint(0, max_len)) for _ in range(num_docs)]


def random_queries(seed, num_queries):
    rng = random.Random(seed)
    return [
        [rng.choice(VOCAB + ["oov", "zzz"]) for _ in range(rng.randint(0, 6))]
        for _ in range(num_queries)
    ]


def assert_matches_okapi(scores, corpus, doc_group, queries, query_group, atol=1e-6, **kw):
    for b, q in enumerate(queries):
        docs = [d for d in range(len(corpus)) if doc_group[d] == query_group[b]]
        with np.errstate(invalid="ignore"):
            ref = BM25Okapi([corpus[d] for d in docs], **kw).get_scores(q)
        # b = 1: BM25Okapi's 0/0 on an empty document is NaN; BM25Index scores it 0
        ref = np.nan_to_num(ref, nan=0.0)
        np.testing.assert_allclose(scores[b, docs].cpu().numpy(), ref, atol=atol, rtol=0)
        others = [d for d in range(len(corpus)) if doc_group[d] != query_group[b]]
        assert (scores[b, others] == 0).all()


def test_tokenize():
    assert tokenize("Caroline's pottery class -- 7 May, 2023!") == [
        "caroline",
        "s",
        "pottery",
        "class",
        "7",
        "may",
        "2023",
    ]
    assert tokenize("") == []
    assert tokenize("Hello hello HELLO") == ["hello"] * 3
    assert tokenize("café, naïve") == ["café", "naïve"]


@pytest.mark.parametrize("seed", range(5))
def test_single_corpus_equals_okapi(device, seed):
    corpus = random_corpus(seed, 30)
    queries = random_queries(100 + seed, 12)
    index = BM25Index(corpus, device=device)
    scores = index.scores(queries)
    assert scores.shape == (12, 30) and scores.device.type == device
    assert_matches_okapi(scores, corpus, [0] * 30, queries, [0] * 12)


@pytest.mark.parametrize("k1,b,epsilon", [(1.5, 0.75, 0.25), (1.2, 0.5, 0.1), (2.0, 1.0, 0.5)])
def test_grouped_corpus_equals_okapi_per_group(device, k1, b, epsilon):
    corpus = random_corpus(7, 60)
    rng = random.Random(8)
    doc_group = torch.tensor([rng.randrange(4) for _ in corpus])
    queries = random_queries(9, 20)
    query_group = torch.tensor([rng.randrange(4) for _ in queries])
    index = BM25Index(corpus, doc_group, k1=k1, b=b, epsilon=epsilon)
    scores = index.scores(queries, query_group, device=device)
    assert_matches_okapi(
        scores,
        corpus,
        doc_group.tolist(),
        queries,
        query_group.tolist(),
        k1=k1,
        b=b,
        epsilon=epsilon,
    )


def test_group_statistics_are_separate():
    # "ski" is in every document of group 0 (negative idf there -> epsilon floor) but rare in
    # group 1: the same word scores differently per group.
    corpus = [["ski", "trip"], ["ski"], ["ski", "mark"], ["ski", "a"], ["b", "c"], ["d"], ["e"]]
    doc_group = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    index = BM25Index(corpus, doc_group)
    scores = index.scores([["ski"], ["ski"]], torch.tensor([0, 1]))
    assert_matches_okapi(scores, corpus, doc_group.tolist(), [["ski"], ["ski"]], [0, 1])
    assert scores[1, 3] > scores[0, 0]


def test_vocabulary_is_per_group_and_other_groups_score_exactly_zero():
    # by hand: group 0's terms {ski, trip, x, y}, group 1's {ski, b, z}: "ski" is two rows of W
    corpus = [["ski", "trip"], ["trip"], ["x"], ["y"], ["ski", "b"], ["b"], ["z"]]
    doc_group = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    index = BM25Index(corpus, doc_group)
    assert index.vocab_size == 7
    assert {(0, "ski"), (1, "ski"), (1, "b")} <= set(index.vocab)
    assert (0, "b") not in index.vocab
    queries = [["ski", "b"], ["ski", "trip"], ["b"]]
    scores = index.scores(queries, torch.tensor([0, 1, 0]))
    assert_matches_okapi(scores, corpus, doc_group.tolist(), queries, [0, 1, 0])
    assert (scores[0, 4:] == 0).all() and (scores[1, :4] == 0).all()  # other groups: exactly 0
    assert (scores[2] == 0).all()  # "b" is only in group 1's vocabulary
    assert scores[0, 0] > 0 and scores[1, 4] > 0


def test_edge_cases():
    corpus = [["a", "b", "a"], [], ["b", "c"], ["c", "c", "c", "d"]]
    index = BM25Index(corpus)
    queries = [[], ["oov"], ["a", "a"], ["a"], ["c", "oov", "c", "d"], ["b", "b", "b"]]
    scores = index.scores(queries)
    assert_matches_okapi(scores, corpus, [0] * 4, queries, [0] * 6, atol=1e-12)
    assert (scores[0] == 0).all() and (scores[1] == 0).all()  # empty query, OOV only
    torch.testing.assert_close(scores[2], 2 * scores[3])  # repeats count, like BM25Okapi
    assert (scores[:, 1] == 0).all()  # the empty document
    # no queries, an empty corpus, a corpus of empty documents
    assert index.scores([]).shape == (0, 4)
    assert BM25Index([]).scores([["a"]]).shape == (1, 0)
    assert (BM25Index([[], []]).scores([["a"]]) == 0).all()
    with pytest.raises(TypeError, match="token lists"):
        index.scores(["a b"])


def test_outside_flag_and_default_group():
    corpus = [["x", "y"], ["y"], ["x"], ["z"]]
    doc_group = torch.tensor([0, 0, 1, 1])
    index = BM25Index(corpus, doc_group)
    scores = index.scores([["x"]], torch.tensor([1]), outside=float("-inf"))
    assert torch.isinf(scores[0, :2]).all() and torch.isfinite(scores[0, 2:]).all()
    # query_group None: the query is scored against group 0
    assert torch.equal(index.scores([["x"]]), index.scores([["x"]], torch.tensor([0])))


def test_float32_index_close():
    corpus = random_corpus(11, 40)
    queries = random_queries(12, 10)
    scores = BM25Index(corpus, dtype=torch.float32).scores(queries)
    assert scores.dtype == torch.float32
    assert_matches_okapi(scores, corpus, [0] * 40, queries, [0] * 10, atol=1e-5)


def test_real_text_through_tokenizer():
    texts = [
        "Caroline went to a pottery class.",
        "Melanie likes camping with her kids!",
        "Caroline's kids? No, Melanie's.",
        "",
    ]
    corpus = [tokenize(t) for t in texts]
    query = tokenize("What did Caroline do at the pottery class?")
    scores = BM25Index(corpus).scores([query])
    np.testing.assert_allclose(scores[0].numpy(), BM25Okapi(corpus).get_scores(query), atol=1e-12)
    assert scores[0].argmax().item() == 0
