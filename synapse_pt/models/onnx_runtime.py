"""The encoder's forward pass in ONNX Runtime: the same weights exported once to an ONNX graph.

``HFEmbedder(runtime="onnx")`` runs its fixed-shape calls through ONNX Runtime's CPU kernels
instead of PyTorch's (issue 45): the transformers model is exported once, by
``torch.onnx.export``, to ``<onnx_dir>/<label>-<weights fingerprint>-masked.onnx`` (changed weights
export again), and every later run loads that file without loading PyTorch's weights.
Pooling, windows and normalisation stay in :class:`~synapse_pt.models.embedder.HFEmbedder`; only
the token states come from here. The vectors agree with PyTorch's to within float32 rounding
(the tolerance and the recall check are in ``experiments/bench_ingestion.md``), not bit for bit,
so the embedding cache keys them apart (``|onnx`` in the embedder's identity).
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

import numpy as np
import torch

log = logging.getLogger(__name__)

RUNTIME_PIP = "pip install onnxruntime onnx"


class _LastHiddenState(torch.nn.Module):
    """The transformers encoder as a plain function of its inputs, in ``names`` order (what the
    export traces: MiniLM takes ``token_type_ids``, MPNet does not)."""

    def __init__(self, model: torch.nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.names, inputs, strict=True))).last_hidden_state


def export_onnx(model: torch.nn.Module, names: tuple[str, ...], path: Path) -> None:
    """Export ``model``'s last hidden state, as a function of the tokenizer's outputs ``names``
    (batch and length dynamic), to ``path``, atomically: written beside it under a temporary
    name, then renamed, so a stopped export leaves no file that a later run would load."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # two rows, the second padded: traced on an all-ones mask, the model's Python-side "nothing
    # is masked" shortcut would be fixed into the graph and padded calls would attend to padding
    example = tuple(torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]) if name == "attention_mask"
                    else torch.zeros(2, 4, dtype=torch.long) if name == "token_type_ids"
                    else torch.tensor([[101, 7, 8, 102], [101, 102, 0, 0]]) for name in names)
    axes = {name: {0: "batch", 1: "tokens"} for name in (*names, "last_hidden_state")}
    try:
        with warnings.catch_warnings():
            # the exporter warns that advanced indexing with negative indices would export
            # wrongly; the encoder's indices are non-negative, and the vectors are checked
            # against PyTorch's (tests/models/test_onnx_runtime.py)
            warnings.filterwarnings("ignore", message="Exporting aten::index operator")
            # the trace fixes Python-side checks on the example's shapes (the attention mask as
            # long as the sequence); the vectors are checked against PyTorch's on padded calls
            warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
            torch.onnx.export(_LastHiddenState(model, names).eval(), example, str(tmp),
                              input_names=list(names), output_names=["last_hidden_state"],
                              dynamic_axes=axes, opset_version=17, dynamo=False)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    log.info("exported the encoder to %s (%.1f MB)", path, path.stat().st_size / 1e6)


class OnnxEncoder:
    """Token states of fixed-shape padded calls from an exported encoder
    (:mod:`synapse_pt.models.fixed_shapes`). Each ``run`` uses one intra-op thread, so a call's
    bits never depend on a thread pool; the encoder's worker threads run calls side by side (an
    ONNX Runtime session takes concurrent ``run`` calls).

    Args:
        path: the ``.onnx`` file written by :func:`export_onnx`.
    """

    def __init__(self, path: Path) -> None:
        try:
            import onnxruntime as ort
        except ImportError as err:
            raise ImportError(f"embedder.runtime=onnx needs ONNX Runtime: {RUNTIME_PIP}") from err
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(path), options,
                                            providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def hidden(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[R, L, d]`` float32 token states of one call's ``[R, L]`` inputs."""
        feed = {name: inputs[name].numpy().astype(np.int64) for name in self.inputs}
        return torch.from_numpy(self.session.run(None, feed)[0])
