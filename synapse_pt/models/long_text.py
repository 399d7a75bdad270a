"""A text encoder that sees the whole of a long text (issue 44: Membox's box index text).

:func:`whole_text_encoder` returns the configured encoder's twin under
``embedder.long_text=windows``: the same weights, tokenizer and disk cache, every text longer than
the encoder's window split into consecutive windows whose token states are mean-pooled together
(:meth:`~synapse_pt.models.embedder.HFEmbedder._windows`). An encoder with no window (the hashing
encoder) already sees every text whole and is returned as it is.
"""

from __future__ import annotations

import copy

from .base import TextEncoder

WINDOWS = "windows"


def whole_text_encoder(encoder: TextEncoder) -> TextEncoder:
    """``encoder`` with ``long_text="windows"`` (itself when it has no window or already
    windows). The twin's cache key carries ``|windows``, as an encoder configured so has."""
    long_text = getattr(encoder, "long_text", None)
    if long_text is None or long_text == WINDOWS:
        return encoder
    twin = copy.copy(encoder)
    twin.long_text = WINDOWS  # type: ignore[attr-defined]
    twin.identity = f"{encoder.identity}|{WINDOWS}"  # type: ignore[attr-defined]
    return twin
