"""HFEmbedder with the bundled all-MiniLM-L6-v2 on the CPU (a real model: marked slow)."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from sample_texts import TEXTS  # tests/ is on sys.path (rootdir conftest)

from synapse_pt.models.base import TextEncoder
from synapse_pt.models.embedder import HFEmbedder
from synapse_pt.models.locate import bundled_minilm_path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def embedder() -> HFEmbedder:
    return HFEmbedder(call_tokens=64)


def test_protocol_shape_and_unit_norm(embedder):
    assert isinstance(embedder, TextEncoder)
    assert embedder.dim == 384 and embedder.name.startswith("all-MiniLM-L6-v2@")
    out = embedder.encode(TEXTS)
    assert out.shape == (len(TEXTS), 384) and out.dtype == torch.float32
    assert out.device.type == "cpu"
    assert torch.allclose(out.norm(dim=1), torch.ones(len(TEXTS)), atol=1e-5)
    assert embedder.encode([]).shape == (0, 384)


def test_similar_texts_are_closer_than_unrelated(embedder):
    out = embedder.encode(TEXTS[:4])
    sim = out @ out.T
    assert sim[0, 2] > 0.5
    assert sim[0, 2] > sim[0, 1] + 0.3 and sim[0, 2] > sim[0, 3] + 0.3


def test_order_and_batching_do_not_change_vectors(embedder):
    together = embedder.encode(TEXTS)
    one_by_one = torch.cat([embedder.encode([t]) for t in TEXTS])
    reversed_ = embedder.encode(TEXTS[::-1]).flip(0)
    assert torch.equal(together, one_by_one)
    assert torch.equal(together, reversed_)


# Turns of different lengths (so a padded batch pads most of them) and questions to rank them.
TURNS = [f"{t} {extra}" for t in TEXTS[:4] for extra in (
    "", "We talked about it for a long while afterwards.",
    "She said it reminded her of the summer she spent by the sea with her grandmother, "
    "painting every morning.")]
QUERIES = ["Who went to a support group?", "What is Melanie painting?", "When are taxes due?"]


def test_cold_reordered_and_warm_vectors_and_rankings_are_bit_identical(tmp_path):
    """Issue 42: a text's vector depends on the text alone, not on its batch-mates. The same texts
    embedded cold, cold in another order beside other texts, and warm from the cache, give
    bit-identical vectors and the same cosine rankings; each also equals the text embedded alone
    (the only sequence of its call)."""
    from synapse_pt.retrieval.dense import cosine_scores, masked_topk

    texts = TURNS + QUERIES
    cold = HFEmbedder(cache_dir=str(tmp_path / "a")).encode(texts)
    others = ["ok", "A completely different sentence about trains and the timetable.", *TEXTS]
    mixed = HFEmbedder(cache_dir=str(tmp_path / "b")).encode(
        others + texts[::-1])[len(others):].flip(0)
    warm_encoder = HFEmbedder(cache_dir=str(tmp_path / "a"))
    warm = warm_encoder.encode(texts[::-1]).flip(0)
    assert warm_encoder.cache.misses == 0 and warm_encoder.load_seconds is None
    alone = torch.cat([HFEmbedder()._embed([t]) for t in texts])
    for other in (mixed, warm, alone):
        assert torch.equal(cold, other)

    def ranking(vectors):
        turns, queries = vectors[:len(TURNS)], vectors[len(TURNS):]
        return masked_topk(cosine_scores(turns, queries), None, len(TURNS))[1]

    assert torch.equal(ranking(cold), ranking(mixed))


@pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None,
                    reason="sentence-transformers not installed")
def test_matches_sentence_transformers(embedder):
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(bundled_minilm_path()), device="cpu")
    long_text = "word " * 400  # past the 256-token truncation: both must cut at the same place
    texts = [*TEXTS, long_text]
    expected = torch.as_tensor(reference.encode(texts, convert_to_numpy=True))
    assert torch.allclose(embedder.encode(texts), expected, atol=1e-5)


def test_disk_cache_hits_misses_and_rerun_without_loading(tmp_path, monkeypatch):
    first = HFEmbedder(cache_dir=str(tmp_path))
    a = first.encode(TEXTS[:3])
    assert (first.cache.hits, first.cache.misses) == (0, 3)
    b = first.encode([TEXTS[2], TEXTS[3], TEXTS[3]])
    assert (first.cache.hits, first.cache.misses) == (1, 4)  # 1 hit, 1 new text (asked twice)
    assert torch.equal(b[0], a[2]) and torch.equal(b[1], b[2])

    # A fresh process-equivalent: everything comes from disk; loading the model would fail.
    rerun = HFEmbedder(cache_dir=str(tmp_path))
    monkeypatch.setattr(rerun, "_load", lambda: pytest.fail("model loaded on a cached rerun"))
    again = rerun.encode(TEXTS[:4])
    assert (rerun.cache.hits, rerun.cache.misses) == (4, 0)
    assert torch.equal(again[:3], a) and torch.equal(again[3], b[1])
    assert rerun.load_seconds is None


def test_chunked_cache_writes_equal_one_pass_and_survive_a_crash(tmp_path, monkeypatch):
    """Texts are embedded in chunks, each cached as it finishes: the vectors equal one pass over
    all texts bit for bit, and a run stopped after its first chunk leaves that chunk on disk for
    the rerun."""
    texts = [t * n for n, t in enumerate(TEXTS, start=1)]  # distinct lengths
    one_pass = HFEmbedder()._embed(texts)
    chunked = HFEmbedder(cache_dir=str(tmp_path / "a"))
    chunked.cache_every = 2
    assert torch.equal(chunked.encode(texts), one_pass)

    crashing = HFEmbedder(cache_dir=str(tmp_path / "b"))
    crashing.cache_every = 2
    embed, calls = crashing._embed, []

    def stop_on_second_chunk(chunk):
        calls.append(len(chunk))
        if len(calls) == 2:
            raise KeyboardInterrupt("stopped")
        return embed(chunk)

    monkeypatch.setattr(crashing, "_embed", stop_on_second_chunk)
    with pytest.raises(KeyboardInterrupt):
        crashing.encode(texts)
    rerun = HFEmbedder(cache_dir=str(tmp_path / "b"))
    assert torch.equal(rerun.encode(texts), one_pass)
    assert (rerun.cache.hits, rerun.cache.misses) == (2, len(texts) - 2)  # the first chunk


def test_cache_keys_depend_on_truncation(tmp_path):
    short = HFEmbedder(cache_dir=str(tmp_path), max_length=8)
    long_ = HFEmbedder(cache_dir=str(tmp_path))
    assert short.identity != long_.identity and short.name == long_.name
    text = "a long sentence that is certainly longer than eight word pieces in total"
    v_short = short.encode([text])
    v_long = long_.encode([text])
    assert long_.cache.misses == 1  # not served the truncated vector
    assert not torch.allclose(v_short, v_long, atol=1e-3)


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="dtype=float16 is allowed on CUDA only"):
        HFEmbedder(dtype="float16")
    with pytest.raises(FileNotFoundError, match="holds no config.json"):
        HFEmbedder(model=str(tmp_path))
    with pytest.raises(ValueError, match="unknown bundled embedder"):
        HFEmbedder(model="bundled:nope")
    with pytest.raises(TypeError, match=r"texts\[1\] is int"):
        HFEmbedder().encode(["a", 3])


def test_every_available_device_matches_cpu(embedder, device):
    on_device = HFEmbedder(device=device)
    out = on_device.encode(TEXTS)
    assert out.device.type == "cpu" and out.dtype == torch.float32
    assert torch.allclose(out, embedder.encode(TEXTS), atol=1e-4)
    assert on_device.name == embedder.name  # the identity names the weights, not the device


def test_width_read_from_the_folder_equals_transformers_config(embedder):
    from transformers import AutoConfig

    assert embedder.dim == AutoConfig.from_pretrained(str(bundled_minilm_path())).hidden_size == 384


@pytest.mark.slow
def test_long_texts_as_windows_equal_the_mean_over_all_their_tokens(tmp_path):
    """``long_text="windows"``: a text past ``max_length`` is encoded window by window and its
    token states mean-pooled together; short texts are unchanged. The reference is written
    directly with transformers."""
    import transformers

    from synapse_pt.models.locate import bundled_minilm_path

    windows = HFEmbedder(long_text="windows", max_length=16)
    truncate = HFEmbedder(max_length=16)
    short = ["a short text", "another one here"]
    torch.testing.assert_close(windows.encode(short), truncate.encode(short), atol=1e-6, rtol=0)
    assert windows.identity != truncate.identity  # different cache keys
    long = ["word " * 40 + "end", "two " * 25]
    path = str(bundled_minilm_path())
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path).eval()
    for text, got in zip(long, windows.encode(long), strict=True):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        step = 16 - 2  # [CLS] + 14 tokens + [SEP] per window
        states, count = torch.zeros(windows.dim), 0
        for w in range(0, len(ids), step):
            window = [tokenizer.cls_token_id, *ids[w:w + step], tokenizer.sep_token_id]
            with torch.no_grad():
                hidden = model(input_ids=torch.tensor([window])).last_hidden_state[0]
            states += hidden.sum(dim=0)
            count += len(window)
        want = torch.nn.functional.normalize(states / count, dim=0)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="long_text"):
        HFEmbedder(long_text="chunks")


def _turn_texts(n: int) -> list[str]:
    """``n`` distinct texts of many lengths: the shipped sample's turns, alone and in pairs."""
    from synapse_pt.data import load_locomo, sample_path

    turns = list(dict.fromkeys(t.text for c in load_locomo(sample_path()).conversations
                               for t in c.turns()))
    pairs = [f"{a} {b}" for i, a in enumerate(turns) for b in turns[i + 1:]]
    return [*turns, *pairs][:n]


@pytest.mark.parametrize("runtime", ["torch", "onnx"])
def test_a_vector_is_the_same_at_any_position_in_calls_of_1_7_and_500_texts(
        runtime, tmp_path_factory, monkeypatch):
    """Issue 50: the fixed-shape calls batch many sequences, yet a probe text's vector is the same
    bits alone (a call of 1 text), third of 7 texts, at positions 0, 250 and 499 of 500 texts
    (other batch-mates each time), and with 1 or 2 worker threads."""
    from synapse_pt.common import threads

    onnx_dir = str(tmp_path_factory.mktemp("onnx"))
    encoder = HFEmbedder(runtime=runtime, onnx_dir=onnx_dir)
    pool = _turn_texts(600)
    probes = ["Caroline went to the LGBTQ support group on Tuesday.", "Did you paint that?"]
    alone = torch.cat([encoder._embed([p]) for p in probes])
    seven = [*pool[:2], probes[0], *pool[2:5], probes[1]]
    assert torch.equal(encoder._embed(seven)[[2, 6]], alone)
    for first, second, mates in ((0, 250, pool[:498]), (250, 499, pool[100:598]),
                                 (499, 3, pool[2:500])):
        batch = list(mates)
        for position, probe in sorted(((first, probes[0]), (second, probes[1]))):
            batch.insert(position, probe)
        assert len(batch) == 500 and batch[first] == probes[0] and batch[second] == probes[1]
        assert torch.equal(encoder._embed(batch)[[first, second]], alone)
    monkeypatch.setattr(threads, "threads_now", lambda: 2)
    assert torch.equal(encoder._embed([*pool[:40], *probes])[-2:], alone)
    monkeypatch.setattr(threads, "threads_now", lambda: 1)
    assert torch.equal(encoder._embed([*probes, *pool[:40]])[:2], alone)


def test_calls_are_batched_with_the_configured_shapes(monkeypatch):
    """Every forward pass gets the fixed shape of its bucket (rows x length), never one row per
    sequence: 40 texts of one bucket take 2 calls of 32 rows at call_tokens=32*L."""
    encoder = HFEmbedder(call_tokens=32 * 16, bucket_lengths=[16, 32])
    shapes: list[tuple[int, int]] = []
    call = encoder._call

    def record(inputs):
        shapes.append(tuple(inputs["input_ids"].shape))
        return call(inputs)

    monkeypatch.setattr(encoder, "_call", record)
    texts = [f"text number {i}" for i in range(40)]  # 5-6 tokens each: the 16-token bucket
    out = encoder._embed(texts)
    assert shapes == [(32, 16), (32, 16)]
    monkeypatch.setattr(encoder, "_call", call)
    assert torch.equal(out, torch.cat([encoder._embed([t]) for t in texts]))


def test_call_shapes_are_part_of_the_identity():
    default = HFEmbedder()
    assert HFEmbedder(call_tokens=512).identity != default.identity
    assert HFEmbedder(bucket_lengths=[32, 64]).identity != default.identity
    assert HFEmbedder(call_tokens=512).name == default.name  # the records name the weights
    with pytest.raises(ValueError, match="bucket_lengths must not exceed max_length"):
        HFEmbedder(bucket_lengths=[16, 512])
    with pytest.raises(ValueError, match="strictly increasing"):
        HFEmbedder(bucket_lengths=[32, 16])


def test_a_long_encode_writes_its_progress_to_the_log(caplog, tmp_path):
    """Issue 50: off a terminal, embedding many texts writes ``embed texts: done/total`` lines to
    the run log (here with a small threshold: 8 texts, 2 a chunk); a small encode writes none."""
    import logging

    encoder = HFEmbedder(cache_dir=str(tmp_path))
    encoder.progress_from, encoder.cache_every = 8, 2
    texts = [f"{t} ({n})" for n, t in enumerate(TEXTS * 2)][:8]
    with caplog.at_level(logging.INFO, logger="synapse_pt.models.embedder"):
        encoder.encode(texts[:3])
        assert not [r for r in caplog.records if "embed texts" in r.getMessage()]
        encoder.encode(texts)  # 3 cached, 5 new: under the threshold
        assert not [r for r in caplog.records if "embed texts" in r.getMessage()]
        encoder.encode([f"{t} again" for t in texts])
    lines = [r.getMessage() for r in caplog.records if "embed texts" in r.getMessage()]
    assert lines[0] == "embed texts: 0/8 texts (0%)"
    assert [line.split(" texts (")[0] for line in lines[1:]] == [
        "embed texts: 2/8", "embed texts: 4/8", "embed texts: 6/8", "embed texts: 8/8"]
    assert lines[-1].endswith("in all")
