"""``python -m synapse_pt.estimate``: a run's cost beforehand
(:mod:`synapse_pt.commands.estimate`)."""

from synapse_pt.commands.estimate import main

if __name__ == "__main__":
    main()
