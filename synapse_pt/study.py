"""``python -m synapse_pt.study``: every variant of a study file
(:mod:`synapse_pt.commands.study`)."""

import sys

from synapse_pt.commands.study import cli

if __name__ == "__main__":
    sys.exit(cli())
