"""What the QA harness asks of a memory's code beyond retrieval: answer steps, judges, scorers.

A related system whose code answers, judges or scores in its own way declares that step in its
own package (``memory/gaama/answer.py``, ``memory/membox/score.py``, ...) and registers it here by
name; the harness (:mod:`synapse_pt.eval.qa.pipeline`) looks every step up by name and knows no
system.
A memory names its own answer step and judge in :attr:`~synapse_pt.memory.base.MemorySystem.
own_steps` (``eval.answer_style=system``, ``eval.judge_protocol=system``); any registered name may
also be asked for directly (``eval.answer_style=gaama`` for another memory).

* :class:`AnswerStep`: the answer request's messages (our wording, and the code's own prompt read
  from its file under ``eval.prompts=upstream``), the token budget it brings, the upstream files it
  reads, and the reply its code records for an empty pack without asking a model;
* :class:`Judge`: the judge requests of one run, the reading of a reply, whether an unreadable
  reply scores 0, and (a judge whose code retries) its own way of asking;
* :class:`Scorer`: a per-question answer metric: its name, the columns it writes, the function;
* :class:`Published`: the system's published numbers, beside the build of ours they match.

The room sits below ``memory/`` and ``eval/``: a memory's package registers its steps
(:mod:`~synapse_pt.steps.registry`), the harness reads them; :mod:`synapse_pt.memory` imports the
related systems' packages, so their names exist once it is imported. ``answers.py``: the answer
step; ``judges.py``: the judge step; ``registry.py``: scorers, published rows, the registry.
"""

from .answers import (
    AnswerPrompt,
    AnswerStep,
    Budget,
    Messages,
    format_item,
    format_timestamp,
    time_ordered,
)
from .judges import (
    JSON_FENCE,
    JSON_OBJECT,
    Judge,
    JudgeCall,
    JudgeInputs,
    json_dicts,
    parse_coverage_score,
    user_request,
)
from .registry import (
    ANSWER_STEPS,
    JUDGES,
    PUBLISHED,
    SCORERS,
    Published,
    Scorer,
    answer_step,
    judge,
    register,
    scorer_columns,
    scorers,
)

__all__ = ["ANSWER_STEPS", "JSON_FENCE", "JSON_OBJECT", "JUDGES", "PUBLISHED", "SCORERS",
           "AnswerPrompt", "AnswerStep", "Budget", "Judge", "JudgeCall", "JudgeInputs",
           "Messages", "Published", "Scorer", "answer_step", "format_item", "format_timestamp",
           "json_dicts", "judge", "parse_coverage_score", "register", "scorer_columns", "scorers",
           "time_ordered", "user_request"]
