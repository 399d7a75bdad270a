"""Errors every layer may raise about its configuration (the bottom of the layering: it imports
nothing from the package)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is invalid. The message names the config key (``memory.k``,
    ``eval.recall_ks``, ``dataset.max_conversations``), the value and what is allowed; the CLI
    prints it as one line (``synapse_pt.commands.run.USER_FACING_ERRORS``). A ``ValueError``, so
    callers that catch those keep working."""
