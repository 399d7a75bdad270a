"""Fixed-shape encoder calls: token sequences grouped by length into buckets, every call padded to
the same rows x bucket length, so a sequence's token states never depend on its batch-mates.

A forward pass over a padded batch rounds a row differently when the batch's shape changes: the
matrix products pick their blocking from the shape, and attention reduces over the padded length
(issue 42 saw one 11-token text differ in the last bits alone and beside two copies of itself).
Here every sequence of :math:`n` tokens goes into the call shape

.. math:: (R_b, L_b), \\quad L_b = \\min\\{L \\in \\mathcal{L} : L \\ge n\\}, \\quad
          R_b = \\max\\left(1, \\left\\lfloor \\frac{T}{L_b} \\right\\rfloor\\right)

with :math:`\\mathcal{L}` the bucket lengths and :math:`T` the tokens a call holds. A call's rows
past its sequences are filled with copies of its first sequence; the attention mask hides the
padding inside a row. Which calls a sequence shares, its position in a call, and how many
sequences the call holds therefore change neither the call's shape nor the operations its row
meets, and each call runs on one thread (:mod:`synapse_pt.models.embedder`): its token states
are a function of its tokens, :math:`(L_b, R_b)` and the encoder's dtype alone (float32, or
bfloat16 where the device has it: the same calls, so the same guarantee), which the encoder's
identity names.

Padding is the price: a sequence is padded up to its bucket's length, and a bucket's last call of
an ``encode`` is filled up to :math:`R_b` rows. The default lengths (:func:`default_lengths`)
grow by 1/8 from 8 tokens, so a row carries at most about 12 % padding;
``scripts/bench_embed_batching.py`` prints the waste on LoCoMo's turns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


def default_lengths(max_length: int, first: int = 8, growth: float = 1.125) -> tuple[int, ...]:
    """Bucket lengths from ``first`` tokens, each about ``growth`` times the one before (at least
    one more), ending at ``max_length``."""
    if max_length < 2:
        raise ValueError(f"max_length must be >= 2, got {max_length}")
    lengths: list[int] = []
    length = min(first, max_length)
    while length < max_length:
        lengths.append(length)
        length = max(length + 1, round(length * growth))
    lengths.append(max_length)
    return tuple(lengths)


@dataclass(frozen=True)
class FixedShapes:
    """The call shapes of an encoder: bucket lengths :math:`\\mathcal{L}` (ascending, the last
    the encoder's ``max_length``) and :math:`T`, the tokens a call holds.

    Attributes:
        lengths: the bucket lengths.
        call_tokens: :math:`T`; a call of bucket :math:`L_b` has :math:`\\max(1, T // L_b)` rows.
    """

    lengths: tuple[int, ...]
    call_tokens: int

    def __post_init__(self) -> None:
        if not self.lengths or list(self.lengths) != sorted(set(self.lengths)) or \
                self.lengths[0] < 1:
            raise ValueError(f"bucket lengths must be positive and strictly increasing, got "
                             f"{list(self.lengths)}")
        if self.call_tokens < 1:
            raise ValueError(f"call_tokens must be >= 1, got {self.call_tokens}")

    @property
    def identity(self) -> str:
        """What the vectors depend on besides the text: the lengths and the call size."""
        return f"buckets={','.join(map(str, self.lengths))}|call_tokens={self.call_tokens}"

    def bucket(self, n: int) -> int:
        """:math:`L_b`, the shortest bucket length that holds ``n`` tokens."""
        for length in self.lengths:
            if n <= length:
                return length
        raise ValueError(f"a sequence of {n} tokens is longer than the longest bucket "
                         f"({self.lengths[-1]})")

    def rows(self, length: int) -> int:
        """:math:`R_b`, the rows of every call of bucket ``length``."""
        return max(1, self.call_tokens // length)

    def plan(self, sizes: Sequence[int]) -> list[tuple[int, list[int]]]:
        """The calls for sequences of ``sizes`` tokens: ``(L_b, indices)`` with at most
        :math:`R_b` indices each, in order of first appearance within each bucket."""
        groups: dict[int, list[int]] = {}
        for index, n in enumerate(sizes):
            groups.setdefault(self.bucket(n), []).append(index)
        calls = []
        for length in sorted(groups):
            members, rows = groups[length], self.rows(length)
            calls.extend((length, members[i:i + rows]) for i in range(0, len(members), rows))
        return calls

    def padded_tokens(self, sizes: Sequence[int]) -> int:
        """Token positions the calls for ``sizes`` compute, filler rows included."""
        return sum(self.rows(length) * length for length, _ in self.plan(sizes))


def pack(sequences: Sequence[dict[str, list[int]]], length: int, rows: int,
         pad_id: int) -> dict[str, torch.Tensor]:
    """One call's ``[rows, length]`` int64 inputs: each sequence's token ids (and its other
    tokenizer fields) left-aligned, ``pad_id`` (0 for the other fields) after them, the attention
    mask 1 on its tokens; rows past the sequences repeat the first sequence."""
    if not 0 < len(sequences) <= rows:
        raise ValueError(f"a call holds 1 to {rows} sequences, got {len(sequences)}")
    names = [key for key in sequences[0] if key != "attention_mask"]
    out = {key: torch.full((rows, length), pad_id if key == "input_ids" else 0,
                           dtype=torch.long) for key in names}
    mask = torch.zeros(rows, length, dtype=torch.long)
    for row in range(rows):
        seq = sequences[row] if row < len(sequences) else sequences[0]
        n = len(seq["input_ids"])
        if n > length:
            raise ValueError(f"a sequence of {n} tokens does not fit a call of length {length}")
        for key in names:
            out[key][row, :n] = torch.tensor(seq[key], dtype=torch.long)
        mask[row, :n] = 1
    out["attention_mask"] = mask
    return out
