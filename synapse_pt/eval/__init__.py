"""The QA harness and what is made of its runs: qa/ (answering, scorers), reports/ (tables, plots),
records/ (run folders), tuning/ (held out, studies).

The harness looks the QA steps up by name (:mod:`synapse_pt.steps`); the related systems' packages
register theirs when :mod:`synapse_pt.memory` is imported, so importing any module of eval/
imports it first and every registered name exists."""

import synapse_pt.memory  # noqa: F401  (registers the related systems' steps)
