"""Fixed-shape encoder calls (issue 50): bucket lengths, the plan of calls and their packing,
checked against shapes and counts worked out by hand."""

from __future__ import annotations

import pytest
import torch

from synapse_pt.models.fixed_shapes import FixedShapes, default_lengths, pack


def test_default_lengths_grow_by_an_eighth_and_end_at_max_length():
    assert default_lengths(32) == (8, 9, 10, 11, 12, 14, 16, 18, 20, 22, 25, 28, 32)
    lengths = default_lengths(256)
    assert lengths[0] == 8 and lengths[-1] == 256
    # each at most 1/8 (rounded) longer than the one before, so padding stays under ~12 %
    pairs = zip(lengths[:-2], lengths[1:-1], strict=True)
    assert all(b - a <= max(1, round(a * 0.125)) for a, b in pairs)
    assert default_lengths(5) == (5,)


def test_bucket_rows_and_plan_by_hand():
    shapes = FixedShapes((4, 8, 16), call_tokens=16)
    assert [shapes.bucket(n) for n in (1, 4, 5, 8, 9, 16)] == [4, 4, 8, 8, 16, 16]
    assert [shapes.rows(n) for n in (4, 8, 16)] == [4, 2, 1]
    sizes = [3, 9, 5, 2, 7, 4, 1, 1, 12]
    # bucket 4: indices 0 3 5 6 7 -> calls of 4 rows: [0 3 5 6], [7]; bucket 8: 2 4 -> [2 4];
    # bucket 16: 1 8 -> [1], [8]
    assert shapes.plan(sizes) == [(4, [0, 3, 5, 6]), (4, [7]), (8, [2, 4]), (16, [1]), (16, [8])]
    assert shapes.padded_tokens(sizes) == 4 * 4 + 4 * 4 + 2 * 8 + 16 + 16
    with pytest.raises(ValueError, match="longer than the longest bucket"):
        shapes.bucket(17)
    with pytest.raises(ValueError, match="strictly increasing"):
        FixedShapes((8, 4), 16)
    with pytest.raises(ValueError, match="call_tokens"):
        FixedShapes((8,), 0)


def test_pack_pads_masks_and_fills_rows_with_the_first_sequence():
    seqs = [{"input_ids": [101, 7, 102], "token_type_ids": [0, 0, 0], "attention_mask": [1, 1, 1]},
            {"input_ids": [101, 102], "token_type_ids": [0, 0], "attention_mask": [1, 1]}]
    out = pack(seqs, length=4, rows=3, pad_id=0)
    assert torch.equal(out["input_ids"], torch.tensor(
        [[101, 7, 102, 0], [101, 102, 0, 0], [101, 7, 102, 0]]))
    assert torch.equal(out["attention_mask"], torch.tensor(
        [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 0]]))
    assert torch.equal(out["token_type_ids"], torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="does not fit"):
        pack(seqs, length=2, rows=2, pad_id=0)
    with pytest.raises(ValueError, match="holds 1 to 1"):
        pack(seqs, length=4, rows=1, pad_id=0)
