"""Print one answer request per related system, rendered as a run renders it (issue 44).

GAAMA's and Membox's LLM-free builds on the shipped sample (hashing embedder), ``eval=qa`` with
the defaults (their code's own answer step, read from the upstream files): the request of one
question of the sample's conversation, its budget, stop and roles, then its last message.

    python experiments/answer_prompt_examples.py [question index, default 0]
"""

from __future__ import annotations

import sys

from omegaconf import OmegaConf

from synapse_pt.commands.build import composed_config, ingested_memory
from synapse_pt.eval.qa.pipeline import EvalSettings, answer_request, blind, for_memory


def main(index: int = 0) -> None:
    for memory in ("gaama", "membox"):
        cfg = composed_config(["dataset=sample", "embedder=hashing", f"memory={memory}",
                               "eval=qa"])
        mem, ds = ingested_memory(cfg, None)
        resolved = OmegaConf.to_container(cfg.eval, resolve=True)
        settings = for_memory(EvalSettings(**{k: v for k, v in resolved.items()
                                              if k in EvalSettings.__dataclass_fields__}), mem)
        conv = ds.conversations[0]
        q = conv.questions[index]
        items = mem.retrieve([blind(q)]).items[0]
        req = answer_request(q, items, f"{conv.speaker_a} and {conv.speaker_b}", settings)
        print(f"===== memory={memory} eval=qa: answer_style={settings.answer_style}, "
              f"max_tokens={req.max_tokens}, stop={list(req.stop)}, "
              f"messages={[role for role, _ in req.messages]}")
        print(req.messages[-1][1])


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
