"""A safetensors copy of a GGUF model, for servers that cannot read GGUF.

``transformers serve`` crashes on the bundled SmolLM2 GGUF, and ``save_pretrained`` refuses a model
loaded from GGUF; a model built from the same config (``from_config``) with the GGUF model's
weights loaded into it (``load_state_dict``) saves normally. The copy is made once into the cache
(``<cache_dir>/safetensors/<label>``), named by the GGUF file's content fingerprint, written to a
temporary folder and moved into place, so an interrupted copy leaves nothing half-written.

    python -m synapse_pt.models.llm.safetensors_copy .cache     # prints the folder
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from .transformers_local import resolve_llm

log = logging.getLogger(__name__)

MARKER = "synapse_pt_copy.json"  # written last: a folder without it is not a finished copy


def safetensors_copy(cache_dir: str | Path, model: str = "bundled:smollm2") -> Path:
    """The folder of a safetensors copy of ``model`` (a GGUF: ``bundled:<name>`` or a ``.gguf``
    path), made on first use: ``config.json``, ``model.safetensors`` and the tokenizer files, in
    float32 (GGUF's quantised weights dequantised, as transformers loads them)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = resolve_llm(model)
    if spec.gguf_file is None:
        raise ValueError(f"safetensors_copy: {model!r} is no GGUF model (a folder or hub id "
                         "that a server can load as it is)")
    fingerprint = spec.fingerprint.replace(":", "-")[:40]
    folder = Path(cache_dir) / "safetensors" / f"{spec.label}-{fingerprint}"
    if (folder / MARKER).is_file():
        return folder
    log.info("writing a safetensors copy of %s to %s", spec.label, folder)
    kw = {"gguf_file": spec.gguf_file, "local_files_only": True}
    tokenizer = AutoTokenizer.from_pretrained(spec.source, **kw)
    gguf_model = AutoModelForCausalLM.from_pretrained(spec.source, dtype="float32", **kw)
    copy = AutoModelForCausalLM.from_config(gguf_model.config)
    copy.load_state_dict(gguf_model.state_dict())
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        copy.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / MARKER).write_text(json.dumps({"source": model, "gguf": spec.gguf_file,
                                              "fingerprint": spec.fingerprint}, indent=2) + "\n")
        if (folder / MARKER).is_file():  # another process finished the same copy meanwhile
            return folder
        if folder.exists():  # an unfinished copy (no marker): replaced
            shutil.rmtree(folder)
        try:
            tmp.replace(folder)
        except OSError:
            if not (folder / MARKER).is_file():  # not a concurrent copy that won the race
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return folder


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    print(safetensors_copy(sys.argv[1] if len(sys.argv) > 1 else ".cache"))
