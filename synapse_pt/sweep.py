"""``python -m synapse_pt.sweep``: one chunk of the batched sweep
(:mod:`synapse_pt.commands.sweep`)."""

from synapse_pt.commands.hydra_app import entry_point
from synapse_pt.commands.sweep import main

if __name__ == "__main__":
    entry_point(main)
