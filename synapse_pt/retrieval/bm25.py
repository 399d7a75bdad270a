r"""Batched BM25Okapi over many small corpora (SPEC §1.2 step 1, the lexical trigger).

Each group of documents (one conversation) is its own corpus with its own statistics, exactly as
if ``rank_bm25.BM25Okapi`` were built on that group alone. For a document :math:`d` of group
:math:`g` and a query :math:`q` (a token list, repeats counted as in ``BM25Okapi.get_scores``)

.. math::
    \mathrm{score}(q, d) = \sum_{t \in q} \mathrm{idf}_g(t)\,
        \frac{f(t, d)\,(k_1 + 1)}{f(t, d) + k_1 \big(1 - b + b\, |d| / \mathrm{avgdl}_g\big)}

    \mathrm{idf}_g(t) = \begin{cases}
        \ln(n_g - n_g(t) + 0.5) - \ln(n_g(t) + 0.5) & \text{if} \ge 0 \\
        \epsilon \cdot \overline{\mathrm{idf}}_g & \text{otherwise}
    \end{cases}

with :math:`n_g` the documents of the group, :math:`n_g(t)` those containing :math:`t`,
:math:`\overline{\mathrm{idf}}_g` the mean raw idf over the group's vocabulary and
:math:`\mathrm{avgdl}_g` its mean document length. The fraction times the idf is a fixed
term-weight matrix :math:`\mathbf{W} \in \mathbb{R}^{V \times N}` built once at index time; the
scores of :math:`B` queries are one sparse product :math:`\mathbf{Q}\mathbf{W}` with the
``[B, V]`` query term counts :math:`\mathbf{Q}`.

The vocabulary is per group: a row of :math:`\mathbf{W}` is a (group, term) pair and a query's
counts go to its own group's rows, so the product never forms a query's scores against other
groups' documents (with ten conversations, nine tenths of a global product).
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["BM25Index"]


class BM25Index:
    r"""BM25Okapi scores of many queries against grouped documents, in one sparse matmul.

    Args:
        corpus_tokens (list[list[str]]): tokens of every document (node), ``N`` lists; use
            :func:`synapse_pt.retrieval.tokenize.tokenize` for corpus and queries alike.
        doc_group (LongTensor, optional): ``[N]`` group (conversation) id of each document;
            ``None`` = one group. Each group is a separate BM25 corpus.
        k1 (float): term-frequency saturation. (default: ``1.5``)
        b (float): length normalisation. (default: ``0.75``)
        epsilon (float): floor for negative idfs, as a fraction of the group's mean idf.
            (default: ``0.25``)
        dtype (torch.dtype): dtype of the term weights and scores. float64 by default, so that
            scores match ``rank_bm25`` to ~1e-12; BM25 is cheap next to the dynamics.
        device (torch.device or str): where the term-weight matrix lives. (default: CPU)

    Edge cases, as ``BM25Okapi``: empty queries score 0; out-of-vocabulary (or
    out-of-group) terms add 0; repeated query terms add once per repeat; an empty document
    counts in :math:`n_g` and :math:`\mathrm{avgdl}_g` and scores 0. Where ``BM25Okapi``
    divides by zero, ``BM25Index`` scores 0: a group whose documents are all empty, and an empty
    document when ``b = 1`` (``BM25Okapi`` returns NaN there).
    """

    def __init__(
        self,
        corpus_tokens: Sequence[Sequence[str]],
        doc_group: Tensor | None = None,
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
        *,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str = "cpu",
    ) -> None:
        self.k1, self.b, self.epsilon = float(k1), float(b), float(epsilon)
        self.dtype = dtype
        N = len(corpus_tokens)
        self.num_docs = N
        if doc_group is None:
            groups = [0] * N
        else:
            if doc_group.numel() != N:
                raise ValueError(
                    f"doc_group has {doc_group.numel()} entries but the corpus has {N} documents"
                )
            groups = [int(g) for g in doc_group.reshape(-1).tolist()]
            if groups and min(groups) < 0:
                raise ValueError("doc_group ids must be >= 0")
        self.num_groups = max(groups) + 1 if groups else 0

        self.vocab: dict[tuple[int, str], int] = {}  # (group, term) -> row of W
        # Per-group statistics, computed in the order BM25Okapi does (insertion order of terms).
        group_docs: list[list[int]] = [[] for _ in range(self.num_groups)]
        for d, g in enumerate(groups):
            group_docs[g].append(d)
        doc_freqs = [Counter(doc) for doc in corpus_tokens]
        doc_len = [len(doc) for doc in corpus_tokens]

        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        for g, docs in enumerate(group_docs):
            if not docs:
                continue
            n_g = len(docs)
            avgdl = sum(doc_len[d] for d in docs) / n_g
            nd: dict[str, int] = {}
            for d in docs:
                for term in doc_freqs[d]:
                    nd[term] = nd.get(term, 0) + 1
            if not nd or avgdl == 0:
                continue  # only empty documents: every score is 0
            idf: dict[str, float] = {}
            idf_sum = 0.0
            negative: list[str] = []
            for term, freq in nd.items():
                value = math.log(n_g - freq + 0.5) - math.log(freq + 0.5)
                idf[term] = value
                idf_sum += value
                if value < 0:
                    negative.append(term)
            eps = self.epsilon * (idf_sum / len(idf))
            for term in negative:
                idf[term] = eps
            for d in docs:
                norm = self.k1 * (1 - self.b + self.b * doc_len[d] / avgdl)
                for term, tf in doc_freqs[d].items():
                    t = self.vocab.setdefault((g, term), len(self.vocab))
                    rows.append(t)
                    cols.append(d)
                    vals.append(idf[term] * (tf * (self.k1 + 1) / (tf + norm)))

        self.doc_group = torch.tensor(groups, dtype=torch.long)
        index = torch.tensor([rows, cols], dtype=torch.long).reshape(2, -1)
        values = torch.tensor(vals, dtype=dtype)
        self._weight_cpu = torch.sparse_coo_tensor(
            index, values, (len(self.vocab), N), check_invariants=False
        ).coalesce()
        self._weights: dict[torch.device, Tensor] = {}
        self.device = torch.device(device)
        self._weight_on(self.device)

    @property
    def vocab_size(self) -> int:
        r"""Rows of :math:`\mathbf{W}`: the (group, term) pairs."""
        return len(self.vocab)

    def _weight_on(self, device: torch.device) -> Tensor:
        """The ``[V, N]`` term-weight matrix (sparse CSR) on ``device``, built once per device."""
        if device not in self._weights:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
                self._weights[device] = self._weight_cpu.to(device).to_sparse_csr()
        return self._weights[device]

    def to(self, device: torch.device | str) -> BM25Index:
        """Move the index (its default scoring device) to ``device``; returns ``self``."""
        self.device = torch.device(device)
        self._weight_on(self.device)
        return self

    def term_weights(self, device: torch.device | str | None = None) -> Tensor:
        r"""Dense ``[V, N]`` copy of :math:`\mathbf{W}` (rows: :attr:`vocab`'s (group, term)
        pairs; for inspection and tests)."""
        return self._weight_on(torch.device(device) if device else self.device).to_dense()

    def _query_matrix(self, query_tokens: Sequence[Sequence[str]], query_group: Sequence[int],
                      device: torch.device) -> Tensor:
        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        for q, (tokens, g) in enumerate(zip(query_tokens, query_group, strict=True)):
            if isinstance(tokens, str):
                raise TypeError(
                    f"query {q} is a string; pass token lists (synapse_pt.retrieval.tokenize)"
                )
            for term, count in Counter(tokens).items():
                t = self.vocab.get((g, term))
                if t is not None:  # terms out of the group's vocabulary add 0
                    rows.append(q)
                    cols.append(t)
                    vals.append(float(count))
        index = torch.tensor([rows, cols], dtype=torch.long).reshape(2, -1)
        Q = torch.sparse_coo_tensor(
            index,
            torch.tensor(vals, dtype=self.dtype),
            (len(query_tokens), len(self.vocab)),
            check_invariants=False,
        ).coalesce()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            return Q.to(device).to_sparse_csr()

    def scores(
        self,
        query_tokens: Sequence[Sequence[str]],
        query_group: Tensor | None = None,
        device: torch.device | str | None = None,
        *,
        outside: float = 0.0,
    ) -> Tensor:
        r"""BM25Okapi scores of ``B`` queries against all ``N`` documents.

        Args:
            query_tokens (list[list[str]]): ``B`` token lists (repeats count).
            query_group (LongTensor, optional): ``[B]`` group of each query; documents of other
                groups get ``outside``. ``None``: every query scores its group-0 corpus (with a
                single group, the whole corpus).
            device (torch.device or str, optional): where to compute (default: the index's).
            outside (float): score of documents outside a query's group: ``0.0`` (default) or
                ``float("-inf")`` to rule them out of any top-k.

        Returns:
            Tensor ``[B, N]`` in the index dtype, equal to
            ``BM25Okapi(group corpus).get_scores(query)`` on the query's group.
        """
        dev = torch.device(device) if device is not None else self.device
        B = len(query_tokens)
        if query_group is None:
            query_group = torch.zeros(B, dtype=torch.long)
        elif query_group.numel() != B:
            raise ValueError(f"query_group has {query_group.numel()} entries for {B} queries")
        if B == 0 or self.num_docs == 0 or self.vocab_size == 0:
            out = torch.zeros(B, self.num_docs, dtype=self.dtype, device=dev)
        else:
            Q = self._query_matrix(query_tokens, query_group.reshape(-1).tolist(), dev)
            out = torch.sparse.mm(Q, self._weight_on(dev)).to_dense()  # 0 outside the group
        if outside == 0.0:
            return out
        same = query_group.to(dev).reshape(-1, 1) == self.doc_group.to(dev).reshape(1, -1)
        return out.masked_fill(~same, outside)
