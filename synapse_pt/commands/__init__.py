"""The commands and their plumbing: what turns a composed config into a run, a sweep, a study or
an estimate, and nothing below it imports.

Entry points (``python -m synapse_pt.<name>`` runs each through a module of the same name at the
package's top)::

    study.py        every variant of a study file (studies/) through run()
    run.py          one run: claim the folder, load, build, evaluate, record
    sweep.py        one chunk of the batched sweep of SYNAPSE's hyperparameters
    estimate.py     a run's cost before it runs

Their plumbing::

    build.py        builders from the composed config (models, memory, LLM, judge)
    hydra_app.py    what the Hydra apps share: the error boundary, callbacks, seeding, threads
    preflight.py    the checks a run makes before it ingests
    study_key.py    names of resumable Optuna studies from what their trials compute
    tracking.py     W&B or nothing
    run_log.py      Hydra's records and the log, written once a run claims its folder
"""
