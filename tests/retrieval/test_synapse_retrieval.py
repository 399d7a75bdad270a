"""SYNAPSE retrieval orchestration: triggers -> energy -> dynamics -> score -> top-k -> gate."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from reference import reference_retrieve

from synapse_pt.data import load_locomo, sample_path
from synapse_pt.data.schema import Conversation
from synapse_pt.graph.extraction import KeywordConceptExtractor
from synapse_pt.memory.synapse import SynapseMemory
from synapse_pt.models.hashing import HashingEncoder
from synapse_pt.retrieval.anchors import initial_energy
from synapse_pt.retrieval.scoring import gate, retrieval_confidence, triple_score
from synapse_pt.retrieval.settings import SynapseParams
from synapse_pt.retrieval.spreading import SynapseInputs, synapse_retrieve


def test_initial_energy_dense_and_bm25_only_anchors():
    # 4 nodes, 1 query. cos: node 0 best; bm25: node 3 best, node 0 second.
    cos = torch.tensor([[0.9], [0.5], [-0.2], [0.1]])
    bm25 = torch.tensor([[2.0], [0.0], [0.0], [4.0]])
    mask = torch.ones(4, 1, dtype=torch.bool)
    a0, anchors = initial_energy(cos, bm25, mask, k_anchor=2)
    # dense anchors {0, 1} get their cosine; node 3 is a BM25-only anchor: 4 / max(4) = 1
    assert anchors[:, 0].tolist() == [True, True, False, True]
    assert a0[:, 0].tolist() == pytest.approx([0.9, 0.5, 0.0, 1.0])
    a0_dense, anchors_dense = initial_energy(cos, bm25, mask, k_anchor=2, use_bm25=False)
    assert a0_dense[:, 0].tolist() == pytest.approx([0.9, 0.5, 0.0, 0.0])


@pytest.mark.parametrize("per_column", [False, True])
def test_triple_score_blocks_equal_the_plain_expression(device, per_column):
    """Row block by row block (several blocks here: 300 x 500 cells) gives the very floats of
    the plain expression; so does the autograd path, which is the plain expression."""
    gen = torch.Generator().manual_seed(3)
    cos, act = (torch.rand(300, 500, generator=gen).to(device) for _ in range(2))
    pr = torch.rand(300, generator=gen).to(device)
    lam = ([torch.rand(500, generator=gen).to(device) for _ in range(3)] if per_column
           else [0.5, 0.3, 0.2])
    want = lam[0] * cos + lam[1] * act + lam[2] * pr[:, None]
    assert torch.equal(triple_score(cos, act, pr, *lam), want)
    grad = act.clone().requires_grad_()
    out = triple_score(cos, grad, pr, *lam)
    assert torch.equal(out.detach(), want)
    out.sum().backward()
    assert torch.equal(grad.grad, torch.broadcast_to(torch.as_tensor(lam[1], device=device),
                                                     (300, 500)))


def test_anchor_never_outside_own_graph():
    cos = torch.tensor([[0.9, 0.9], [0.1, 0.1]])
    mask = torch.tensor([[True, False], [False, True]])
    a0, anchors = initial_energy(cos, torch.zeros(2, 2), mask, k_anchor=5)
    assert anchors.tolist() == [[True, False], [False, True]]
    assert torch.allclose(a0, torch.tensor([[0.9, 0.0], [0.0, 0.1]]))


def test_triple_score_gate_and_confidence():
    cos = torch.tensor([[0.8], [0.2]])
    act = torch.tensor([[0.1], [0.9]])
    pr = torch.tensor([0.0, 1.0])
    s = triple_score(cos, act, pr, 0.5, 0.3, 0.2)
    assert s[:, 0].tolist() == pytest.approx([0.5 * 0.8 + 0.3 * 0.1, 0.5 * 0.2 + 0.3 * 0.9 + 0.2])
    top = s.argmax(dim=0)
    potential = torch.tensor([[0.3], [0.7]])
    mask = torch.ones(2, 1, dtype=torch.bool)

    def c_ret(source: str) -> list[float]:
        return retrieval_confidence(source, top, top_score=s.amax(dim=0), activation=act,
                                    potential=potential, cos=cos, mask=mask).tolist()

    # node 1 is on top (0.57 > 0.43): every reading of SPEC §1.5, by hand
    assert c_ret("activation") == pytest.approx([0.9])
    assert c_ret("max_activation") == pytest.approx([0.9])
    assert c_ret("potential") == pytest.approx([0.7])
    assert c_ret("score") == pytest.approx([0.57])
    assert c_ret("similarity") == pytest.approx([0.2])
    assert gate(torch.tensor([0.9]), 0.95).tolist() == [True]
    assert gate(torch.tensor([0.9]), 0.12).tolist() == [False]


def _two_graph_inputs():
    torch.manual_seed(0)
    n, d, b = 12, 8, 5
    x = torch.nn.functional.normalize(torch.randn(n, d), dim=1)
    node_graph = torch.tensor([0] * 7 + [1] * 5)
    src = torch.randint(0, 7, (20,))
    dst = torch.randint(0, 7, (20,))
    src2 = torch.randint(7, 12, (10,))
    dst2 = torch.randint(7, 12, (10,))
    edge_index = torch.stack([torch.cat([src, src2]), torch.cat([dst, dst2])])
    edge_weight = torch.rand(30)
    q = torch.nn.functional.normalize(torch.randn(b, d), dim=1)
    qg = torch.tensor([0, 1, 0, 1, 1])
    bm25 = torch.rand(n, b) * (node_graph[:, None] == qg[None, :])
    return dict(x=x, node_graph=node_graph, edge_index=edge_index, edge_weight=edge_weight,
                pagerank_unit=torch.rand(n), query_emb=q, query_graph=qg, bm25=bm25)


@pytest.mark.parametrize("overrides", [
    {}, {"k_anchor": 2, "fan": False, "T": 2, "M": 2},
    {"fire_zero": True, "beta": 0.4, "delta": 0.1, "k": 6, "lambda3": 0.0},
    {"bm25_trigger": False, "theta": 0.2, "gamma": 2.0}])
def test_synapse_retrieve_equals_plain_reference_and_masks_graphs(overrides):
    """The whole batched retrieval against a per-query plain-Python reference of SPEC §1.2."""
    inputs = {k: v.double() if v.is_floating_point() else v
              for k, v in _two_graph_inputs().items()}
    p = SynapseParams(**{"k": 4, "k_anchor": 3, **overrides})
    out = synapse_retrieve(SynapseInputs(**inputs), p)
    own = inputs["node_graph"][out.index] == inputs["query_graph"][:, None]
    assert own[out.valid].all()  # every returned node lies in its query's own graph

    ref_params = dataclasses.asdict(p)
    bm25 = inputs["bm25"] if p.bm25_trigger else torch.zeros_like(inputs["bm25"])
    ei, w = inputs["edge_index"], inputs["edge_weight"]
    ref = reference_retrieve(
        inputs["x"].tolist(), inputs["node_graph"].tolist(),
        list(zip(ei[0].tolist(), ei[1].tolist(), w.tolist(), strict=True)),
        inputs["pagerank_unit"].tolist(), inputs["query_emb"].tolist(),
        inputs["query_graph"].tolist(), bm25.tolist(), ref_params)
    for b, (top, c_ret, gated) in enumerate(ref):
        n_valid = int(out.valid[b].sum())
        assert n_valid == min(p.k, len(top))
        assert out.index[b, :n_valid].tolist() == top
        assert float(out.c_ret[b]) == pytest.approx(c_ret, abs=1e-9)
        assert bool(out.gated[b]) == gated


def test_per_column_params_equal_separate_runs():
    inputs = _two_graph_inputs()
    betas = torch.tensor([0.0, 0.15, 0.3, 0.15, 0.0])
    batched = synapse_retrieve(SynapseInputs(**inputs), SynapseParams(k=4, beta=betas))
    for col, beta in enumerate(betas.tolist()):
        one = synapse_retrieve(SynapseInputs(**inputs), SynapseParams(k=4, beta=beta))
        assert torch.equal(batched.index[col], one.index[col])
        assert batched.c_ret[col] == pytest.approx(float(one.c_ret[col]))
    sub = SynapseParams(k=4, beta=betas).select(torch.tensor([1, 2]))
    assert sub.beta.tolist() == pytest.approx([0.15, 0.3])


@pytest.fixture(scope="module")
def two_conversations():
    ds = load_locomo(sample_path())
    conv = ds.conversations[0]
    renamed = Conversation("sample-2", conv.speaker_a, conv.speaker_b, conv.sessions[:2],
                           tuple(dataclasses.replace(q, sample_id="sample-2")
                                 for q in conv.questions))
    renamed_sessions = tuple(
        dataclasses.replace(s, turns=tuple(dataclasses.replace(t, sample_id="sample-2")
                                           for t in s.turns))
        for s in renamed.sessions)
    renamed = dataclasses.replace(renamed, sessions=renamed_sessions)
    return [conv, renamed]


def _memory(device="cpu", **params):
    enc = HashingEncoder(128)
    return SynapseMemory(enc, KeywordConceptExtractor(enc), params=SynapseParams(**params),
                         engine={"device": device})


def test_memory_grouped_equals_single_block(two_conversations, device):
    questions = [q for c in two_conversations for q in c.questions]
    mem = _memory(device, k=10)
    mem.ingest(two_conversations)
    grouped = mem.retrieve(questions)
    mem.configure_retrieval(engine={**mem.engine, "group_by_graph": False})
    single = mem.retrieve(questions)
    assert grouped.node_ids() == single.node_ids()
    assert torch.allclose(grouped.c_ret, single.c_ret)
    assert torch.equal(grouped.gated, single.gated)
    # a question of the renamed copy only sees its own (two-session) conversation
    n1 = sum(1 for q in questions if q.sample_id == "sample-1")
    for row in grouped.node_ids()[n1:]:
        assert all(not nid.startswith("D3:") for nid in row)


def test_memory_rank_episodic_only(two_conversations):
    questions = list(two_conversations[0].questions)
    mem = _memory(k=10, rank_episodic_only=True)
    mem.ingest(two_conversations[:1])
    result = mem.retrieve(questions)
    assert all(it.kind == "episodic" for row in result.items for it in row)
    assert all(len(row) == 10 for row in result.items)
    everything = _memory(k=10)
    everything.ingest(two_conversations[:1])
    assert any(it.kind == "semantic" for row in everything.retrieve(questions).items
               for it in row)


def test_no_graph_memory_has_no_edges_and_no_concepts(two_conversations):
    enc = HashingEncoder(64)
    mem = SynapseMemory(enc, KeywordConceptExtractor(enc), use_graph=False)
    mem.ingest(two_conversations[:1])
    assert mem.batch.num_edges == 0
    assert mem.batch.num_nodes == two_conversations[0].num_turns
    assert mem.describe()["use_graph"] is False


def test_sweep_equals_separate_retrievals(two_conversations, device):
    """Also on CUDA with the grid's tensors made on the host (as scripts/bench_sweep.py's
    warm-up passes them): the sweep moves them to the memory's device."""
    questions = [q for c in two_conversations for q in c.questions]
    mem = _memory(device, k=8)
    mem.ingest(two_conversations)
    configs = SynapseParams(k=8, beta=torch.tensor([0.0, 0.15, 0.4]),
                            delta=torch.tensor([0.5, 0.0, 0.5]),
                            lambda3=torch.tensor([0.2, 0.2, 0.0]))
    swept = mem.sweep(questions, configs)
    B = len(questions)
    assert swept.index.shape == (3 * B, 8)
    for c, (beta, delta, lambda3) in enumerate([(0.0, 0.5, 0.2), (0.15, 0.0, 0.2),
                                                (0.4, 0.5, 0.0)]):
        mem.params = SynapseParams(k=8, beta=beta, delta=delta, lambda3=lambda3)
        one = mem.rank(*mem.query_inputs(questions), mem.params)
        rows = slice(c * B, (c + 1) * B)
        assert torch.equal(swept.index[rows].cpu(), one.index.cpu())
        assert torch.allclose(swept.c_ret[rows].cpu(), one.c_ret.cpu())
        assert torch.equal(swept.gated[rows].cpu(), one.gated.cpu())


def test_sweep_table_keeps_the_memory_settings_and_equals_runs_alone(two_conversations):
    """A swept configuration's row is what a retrieval with the memory's own settings (here
    k, T, M, k_anchor and the inhibition schedule off their defaults) and that configuration's
    values gives, scored with the id-based recall."""
    from synapse_pt.eval.qa.pipeline import blind
    from synapse_pt.eval.qa.scorers.retrieval import evidence_recall_at_k
    from synapse_pt.eval.tuning.grid import draw_configs, sweep_table

    questions = list(two_conversations[0].questions)  # the full conversation: every evidence
    mem = _memory(k=12, T=2, M=4, k_anchor=3, inhibition="last_step")
    mem.ingest(two_conversations)
    grid = draw_configs(3, seed=1)
    table = sweep_table(mem, questions, grid, chunk_size=2, device="cpu")
    own = mem.params
    answerable = torch.tensor([q.category < 5 for q in questions])
    for i in range(3):
        mem.configure_retrieval(params=dataclasses.replace(
            own, **{name: float(v[i]) for name, v in grid.items()}))
        alone = mem.retrieve([blind(q) for q in questions])
        recall = evidence_recall_at_k(alone.node_ids(), [q.evidence for q in questions],
                                      ks=(10,))[10]
        row = table.iloc[i]
        assert row["recall@10"] == pytest.approx(float(torch.nanmean(recall[answerable])))
        assert row["false_rejection"] == pytest.approx(
            alone.gated[answerable].float().mean().item())
        assert row["true_rejection"] == pytest.approx(
            alone.gated[~answerable].float().mean().item())
    # the memory's settings matter here: the paper's T, M and k_anchor give another table
    mem.configure_retrieval(params=SynapseParams())
    other = sweep_table(mem, questions, grid, chunk_size=2, device="cpu")
    assert not other["recall@10"].equals(table["recall@10"])


def test_sweep_chunks_reuse_the_query_inputs_until_the_memory_changes(two_conversations,
                                                                      monkeypatch):
    questions = [q for c in two_conversations for q in c.questions]
    mem = _memory(k=8)
    mem.ingest(two_conversations)
    calls = []
    real = mem.query_inputs
    monkeypatch.setattr(mem, "query_inputs", lambda qs: calls.append(len(qs)) or real(qs))
    chunk = [SynapseParams(k=8, beta=torch.tensor([b, b + 0.1])) for b in (0.0, 0.2)]
    first, second = (mem.sweep(questions, c) for c in chunk)
    assert calls == [len(questions)]  # the second chunk reused the first one's inputs
    mem.sweep(questions[:3], chunk[0])  # other questions: computed afresh
    mem.configure_retrieval(params=SynapseParams(k=8))  # reconfigured: afresh again
    again = mem.sweep(questions, chunk[1])
    assert calls == [len(questions), 3, len(questions)]
    assert torch.equal(again.index, second.index) and torch.equal(again.c_ret, second.c_ret)


def test_sweep_chunks_reuse_each_blocks_triggers(two_conversations, monkeypatch):
    """The cosine, anchors and initial energy of a conversation's block are computed once per
    question set and anchor settings, chunk after chunk, and the chunks rank exactly as with
    fresh ones."""
    from synapse_pt.memory import synapse as memory_module

    questions = [q for c in two_conversations for q in c.questions]
    mem = _memory(k=8)
    mem.ingest(two_conversations)
    calls = []
    real = memory_module.query_triggers
    monkeypatch.setattr(memory_module, "query_triggers",
                        lambda inputs, params: calls.append(inputs.query_emb.shape[0])
                        or real(inputs, params))
    chunk = [SynapseParams(k=8, beta=torch.tensor([b, b + 0.1])) for b in (0.0, 0.2)]
    mem.sweep(questions, chunk[0])
    second = mem.sweep(questions, chunk[1])
    graphs = len(two_conversations)
    assert len(calls) == graphs and sum(calls) == len(questions)  # once per block
    mem.sweep(questions, SynapseParams(k=8, k_anchor=2, beta=torch.tensor([0.0, 0.1])))
    assert len(calls) == 2 * graphs  # other anchor settings: computed afresh
    mem.sweep(questions[:3], chunk[0])  # other questions: afresh
    assert len(calls) == 2 * graphs + 1
    fresh = _memory(k=8)
    fresh.ingest(two_conversations)
    alone = fresh.sweep(questions, chunk[1])  # its first chunk: nothing reused
    assert torch.equal(alone.index, second.index) and torch.equal(alone.score, second.score)
    assert torch.equal(alone.c_ret, second.c_ret) and torch.equal(alone.gated, second.gated)


def test_evidence_recall_from_index_matches_id_based():
    from synapse_pt.eval.qa.scorers.retrieval import (
        evidence_recall_at_k,
        evidence_recall_from_index,
    )

    top = torch.tensor([[3, 1, 7, 0], [2, 2, 5, 9], [4, 8, 6, 1]])
    valid = torch.tensor([[True] * 4, [True, True, True, False], [True] * 4])
    evidence = torch.tensor([[1, 0, -1], [9, -1, -1], [-1, -1, -1]])
    got = evidence_recall_from_index(top, valid, evidence, ks=(1, 2, 4))
    ids = [[str(i) for i, v in zip(r, ok, strict=True) if v]
           for r, ok in zip(top.tolist(), valid.tolist(), strict=True)]
    ev = [[str(i) for i in r if i >= 0] for r in evidence.tolist()]
    want = evidence_recall_at_k(ids, ev, ks=(1, 2, 4))
    for k in (1, 2, 4):
        assert torch.allclose(got[k], want[k].to(torch.float64), equal_nan=True)
    assert got[4].tolist()[:2] == [1.0, 0.0]  # the padded slot (9) does not count


def test_strong_triggers_neutral_query_and_analysed_bm25(two_conversations):
    """``memory.triggers``: the dense trigger embeds the question without the speakers' names, and
    the lexical trigger is BM25Okapi over stop-word-free Porter-stemmed node texts."""
    from rank_bm25 import BM25Okapi

    from synapse_pt.retrieval.text import Analyzer, neutralise_speakers

    conv = two_conversations[0]
    enc = HashingEncoder(32)
    memory = SynapseMemory(enc, KeywordConceptExtractor(),
                           triggers={"neutralise_speakers": True, "stopwords": True, "stem": True})
    memory.ingest([conv])
    questions = [dataclasses.replace(q, category=0, answer=None) for q in conv.questions[:5]]
    _, query_emb, bm25 = memory.query_inputs(questions)
    speakers = [conv.speaker_a, conv.speaker_b]
    expected = enc.encode([neutralise_speakers(q.question, speakers) for q in questions])
    torch.testing.assert_close(query_emb, expected.to(query_emb))
    assert any(neutralise_speakers(q.question, speakers) != q.question for q in questions)
    analyzer = Analyzer(stopwords=True, stem=True)
    okapi = BM25Okapi([analyzer(t) for t in memory.batch.texts])
    for b, q in enumerate(questions):
        torch.testing.assert_close(bm25[:, b].double(), torch.tensor(
            okapi.get_scores(analyzer(q.question)), dtype=torch.float64), atol=1e-5, rtol=0)
    assert memory.describe()["triggers"] == {"neutralise_speakers": True, "stopwords": True,
                                             "stem": True}
    with pytest.raises(ValueError, match="memory.triggers: unknown options"):
        SynapseMemory(enc, KeywordConceptExtractor(), triggers={"lemmatise": True})


def test_mutation_survivors_lexical_anchors_need_positive_bm25_and_gate_boundary():
    """Survivors of the mutation run (experiments/hardening.md): a zero BM25 score never makes a
    lexical anchor; without the BM25 trigger the max/constant energies use the dense anchors only;
    the gate rejects strictly below tau_gate; the triple score's defaults are the paper's."""
    cos = torch.tensor([[0.9], [0.1], [0.2], [0.3]])
    bm25 = torch.tensor([[0.0], [2.0], [0.0], [0.0]])  # one positive score only
    mask = torch.ones(4, 1, dtype=torch.bool)
    a0, anchors = initial_energy(cos, bm25, mask, k_anchor=1)
    assert anchors[:, 0].tolist() == [True, True, False, False]  # dense {0}, lexical {1}
    assert a0[:, 0].tolist() == pytest.approx([0.9, 1.0, 0.0, 0.0])
    a0, anchors = initial_energy(cos, torch.zeros(4, 1), mask, k_anchor=2)
    assert anchors[:, 0].tolist() == [True, False, False, True]  # no lexical anchor at all
    for energy, expected in (("max", [0.9, 0.0, 0.0, 0.3]), ("constant", [1.0, 0.0, 0.0, 1.0])):
        a0, anchors = initial_energy(cos, bm25, mask, k_anchor=2, use_bm25=False, energy=energy)
        assert anchors[:, 0].tolist() == [True, False, False, True]
        assert a0[:, 0].tolist() == pytest.approx(expected)
    assert gate(torch.tensor([0.12, 0.1199]), 0.12).tolist() == [False, True]
    cos2, act, pr = torch.tensor([[1.0]]), torch.tensor([[1.0]]), torch.tensor([1.0])
    assert triple_score(cos2, act, pr).item() == pytest.approx(0.5 + 0.3 + 0.2)
    top = torch.tensor([0])
    with pytest.raises(ValueError, match="'potential' needs the last step's potential"):
        retrieval_confidence("potential", top, top_score=torch.ones(1), activation=act,
                             potential=None, cos=cos2, mask=torch.ones(1, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="unknown C_ret reading 'energy'"):
        retrieval_confidence("energy", top, top_score=torch.ones(1), activation=act,
                             potential=None, cos=cos2, mask=torch.ones(1, 1, dtype=torch.bool))


def test_fused_trigger_without_activation_ranks_as_the_fused_retriever(two_conversations):
    """``memory.fused_trigger``: with lambda2 = lambda3 = 0 and turns ranked, SYNAPSE's ranking is
    the fused retriever's; with activation back on it differs."""
    from synapse_pt.memory.fused import FusedMemory

    conv = two_conversations[0]
    enc = HashingEncoder(32)
    fused_args = {"weights": {"dense": 0.7, "bm25_window": 0.9, "speaker": 0.5}, "rho": 0.3}
    questions = [dataclasses.replace(q, category=0, answer=None) for q in conv.questions]
    fused = FusedMemory(enc, k=10, **fused_args)
    fused.ingest([conv])
    expected = fused.retrieve(questions).node_ids()
    params = {"lambda2": 0.0, "lambda3": 0.0, "k": 10}
    memory = SynapseMemory(enc, KeywordConceptExtractor(), params=params,
                           readings={"rank_episodic_only": True}, fused_trigger=fused_args)
    memory.ingest([conv])
    assert memory.retrieve(questions).node_ids() == expected
    memory.configure_retrieval(params={**params, "lambda2": 0.8})
    assert memory.retrieve(questions).node_ids() != expected
    assert memory.describe()["fused_trigger"]["weights"] == fused_args["weights"]
    with pytest.raises(ValueError, match="memory.fused_trigger.k: set by the SYNAPSE memory"):
        SynapseMemory(enc, KeywordConceptExtractor(), fused_trigger={"k": 5})


def test_retrieval_runs_the_activation_layer_over_the_cached_adjacency(two_conversations,
                                                                        monkeypatch):
    """The layer is the hot path: a retrieve runs ``ActivationDynamics`` once per conversation,
    over an adjacency built once per conversation after ingest and reused by later calls."""
    import synapse_pt.memory.synapse as memory_module
    from synapse_pt.nn import ActivationDynamics

    calls = {"layer": 0, "adjacency": 0}
    forward = ActivationDynamics.forward
    build = memory_module.activation_adjacency

    def counted_forward(self, *args, **kwargs):
        calls["layer"] += 1
        assert kwargs["normalized"] is True  # handed the cached adjacency, never edges
        return forward(self, *args, **kwargs)

    def counted_build(*args, **kwargs):
        calls["adjacency"] += 1
        return build(*args, **kwargs)

    monkeypatch.setattr(ActivationDynamics, "forward", counted_forward)
    monkeypatch.setattr(memory_module, "activation_adjacency", counted_build)
    questions = [q for c in two_conversations for q in c.questions]
    own = list(two_conversations[0].questions)
    mem = _memory(k=10)
    mem.ingest(two_conversations[:1])
    first = mem.retrieve(own)
    second = mem.retrieve(own)
    assert calls == {"layer": 2, "adjacency": 1}  # one conversation, two retrieves
    assert first.node_ids() == second.node_ids()
    mem.ingest(two_conversations[1:])  # a new graph in the batch: the cache is rebuilt
    mem.retrieve(questions)
    mem.retrieve(questions)
    assert calls == {"layer": 6, "adjacency": 3}


def test_a_subclassed_layer_changes_retrieval(two_conversations):
    """A subclass of the layer (here: one step, no inhibition, no firing: :math:`a = u`)
    changes what synapse_retrieve returns, and equals the same maths run by hand."""
    from synapse_pt.nn import ActivationDynamics, activation_adjacency

    class Linear(ActivationDynamics):
        def __init__(self) -> None:
            super().__init__(M=0, T=1, fan=True, fire_zero=False, inhibition="every_step",
                             frontier="dense", frontier_density=0.05)

        def forward(self, a0, adj_t, edge_weight=None, **kwargs):
            kwargs["return_potential"] = True  # the step's max(0, u) = u (no inhibition)
            return super().forward(a0, adj_t, edge_weight, **kwargs)[1]

    x = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]]), dim=1)
    inputs = dict(x=x, node_graph=torch.zeros(3, dtype=torch.long),
                  edge_index=torch.tensor([[0, 1], [1, 2]]), edge_weight=torch.ones(2),
                  pagerank_unit=torch.zeros(3), query_emb=torch.tensor([[1.0, 0.0]]),
                  query_graph=torch.zeros(1, dtype=torch.long), bm25=torch.zeros(3, 1))
    params = SynapseParams(k=3, k_anchor=1, T=1, lambda1=0.0, lambda2=1.0, lambda3=0.0,
                           tau_gate=0.0, bm25_trigger=False)
    swapped = synapse_retrieve(SynapseInputs(**inputs), params, dynamics=Linear())
    # by hand: a0 = cos on the one anchor (node 0, cos 1); u = (1 - 0.5) a0 + 0.8 P a0, with
    # P the fan-normalised adjacency (node 0's one out-edge to node 1): u = [0.5, 0.8, 0]
    adj = activation_adjacency(inputs["edge_index"], inputs["edge_weight"], 3).to_dense()
    a0 = torch.tensor([1.0, 0.0, 0.0])
    u = 0.5 * a0 + 0.8 * adj @ a0
    assert u.tolist() == pytest.approx([0.5, 0.8, 0.0])
    assert swapped.index[0].tolist()[:2] == [1, 0]  # ranked by a = u
    assert swapped.score[0].tolist()[:2] == pytest.approx([0.8, 0.5])
    default = synapse_retrieve(SynapseInputs(**inputs), params)  # sigmoid firing: other scores
    assert default.score[0].tolist()[:2] != pytest.approx([0.8, 0.5])


@pytest.mark.parametrize("levels", [4, 40, 0])
@pytest.mark.parametrize("seed", range(3))
def test_masked_topk_equals_a_stable_sort_with_ties(seed, levels, device):
    """``masked_topk`` (one topk; columns with a tie across the k-th place redone by filling
    ties in index order) against the plain reference: a stable descending sort of the masked
    scores, first k rows. ``levels``: scores rounded to that many values (many ties at 4, ties
    inside the top-k but rarely at its boundary at 40, none at 0: continuous)."""
    from synapse_pt.retrieval.dense import masked_topk

    g = torch.Generator().manual_seed(seed)
    for _ in range(100):
        n, b = int(torch.randint(1, 50, (1,), generator=g)), int(torch.randint(1, 6, (1,),
                                                                             generator=g))
        k = int(torch.randint(1, 60, (1,), generator=g))
        scores = torch.rand(n, b, generator=g)
        if levels:
            scores = (scores * levels).round() / levels
        scores = scores.to(device)
        mask = (torch.rand(n, b, generator=g) < 0.7).to(device)
        values, index = masked_topk(scores, mask, k)
        ref = scores.masked_fill(~mask, float("-inf")).sort(dim=0, descending=True, stable=True)
        assert torch.equal(values, ref.values[:k]) and torch.equal(index, ref.indices[:k])
