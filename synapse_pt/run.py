"""``python -m synapse_pt.run``: one run of the composed config (:mod:`synapse_pt.commands.run`)."""

from synapse_pt.commands.hydra_app import entry_point
from synapse_pt.commands.run import main

if __name__ == "__main__":
    entry_point(main)
