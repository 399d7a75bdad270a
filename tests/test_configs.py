"""The Hydra configs: every option of every group and every experiment composes, every ``_target_``
instantiates (offline, nothing loaded eagerly), and SPEC §1's hyperparameters are config values
with the paper's defaults."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from synapse_pt.commands.study_key import register_resolvers
from synapse_pt.memory.fused import SignalSettings
from synapse_pt.memory.gaama import settings as gaama
from synapse_pt.memory.membox import settings as membox

# ${study_key:} of configs/hparams_search (synapse_pt.commands.run does this too)
register_resolvers()

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
# groups composed inside others, never chosen on the command line: fusion/ (the fused retriever's
# weights, composed by memory=fused and the fused-stack experiments)
COMPOSED = ("fusion",)
GROUPS = sorted(p.name for p in CONFIG_DIR.iterdir()
                if p.is_dir() and p.name not in ("hydra", *COMPOSED))
OPTIONS = [(g, f.stem) for g in GROUPS for f in sorted((CONFIG_DIR / g).glob("*.yaml"))]
EXPERIMENTS = [o for g, o in OPTIONS if g == "experiment"]
ABLATIONS = ["no_gate", "beta0", "no_fan", "no_decay", "no_activation", "no_graph",
             "vectors_only"]

# each related system's settings groups: the constructor argument -> the group whose fields the
# config gives as flat keys (memory.seeds, memory.window)
SETTINGS_GROUPS = {"gaama": {"retrieval": gaama.Retrieval, "build": gaama.Build},
                   "membox": {"retrieval": membox.Retrieval, "build": membox.Build},
                   "fused": {"signal_settings": SignalSettings}}

# SPEC §1: name -> (config key, the paper's value)
SPEC_HPARAMS = {
    "S": ("memory.params.S", 0.8),
    "delta": ("memory.params.delta", 0.5),
    "beta": ("memory.params.beta", 0.15),
    "M": ("memory.params.M", 7),
    "gamma": ("memory.params.gamma", 5.0),
    "theta": ("memory.params.theta", 0.5),
    "T": ("memory.params.T", 3),
    "fan": ("memory.params.fan", True),
    "lambda1": ("memory.params.lambda1", 0.5),
    "lambda2": ("memory.params.lambda2", 0.3),
    "lambda3": ("memory.params.lambda3", 0.2),
    "tau_gate": ("memory.params.tau_gate", 0.12),
    "k": ("memory.params.k", 30),
    "tau_dup": ("memory.graph.tau_dup", 0.92),
    "rho": ("memory.graph.rho", 0.01),
    "N": ("memory.graph.window", 5),
}


def make_cfg(*overrides: str, output_dir: str = "/tmp/synapse_pt_test_unused",
             config_name: str = "run") -> DictConfig:
    """Compose ``configs/<config_name>.yaml`` with ``overrides`` (hydra runtime fields absent)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name, overrides=[*overrides, f"paths.output_dir={output_dir}"])


def test_every_group_has_options():
    assert set(GROUPS) >= {"dataset", "embedder", "llm", "extractor", "memory", "eval", "logger",
                           "paths", "experiment", "hparams_search"}
    assert set(EXPERIMENTS) == {"paper_main", "synapse_tuned", "synapse_strong", "synapse_fused",
                                "gaama_fused", "membox_fused", "membox_published",
                                *ABLATIONS}


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_option_composes_and_resolves(group, option):
    cfg = make_cfg(f"{group}={option}")
    # every interpolation resolves (mandatory ??? values excepted: llm=hf needs a model)
    container = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    assert container["task_name"]
    assert "_target_" in container["memory"]


def test_hydra_launchers_and_sweeper_compose():
    for launcher, target in (("local", "LocalLauncher"), ("slurm", "SlurmLauncher")):
        cfg = make_cfg(f"hydra/launcher={launcher}", config_name="run")
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            full = compose("run", overrides=[f"hydra/launcher={launcher}"],
                           return_hydra_config=True)
        assert full.hydra.launcher._target_.endswith(target)
        assert cfg.memory._target_.endswith("SynapseMemory")
    assert full.hydra.launcher.timeout_min > 0
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        sweep = compose("run", overrides=["hparams_search=synapse_optuna", "dataset=sample"],
                        return_hydra_config=True)
    sweeper = sweep.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper")
    assert sweeper.direction == "maximize" and sweeper.n_jobs == 1
    assert sweeper.sampler._target_ == "optuna.samplers.TPESampler"
    assert sweeper.sampler.seed == sweep.seed
    assert sweeper.storage.startswith("sqlite:///") and sweeper.storage.endswith("optuna.sqlite")
    assert sweeper.study_name.startswith("synapse_optuna_sample_recall@10.mean_q_1_4_")  # + key
    assert sweep.objective == "recall@10.mean_q_1_4"
    # the one declared space (synapse_pt/retrieval/search_space.py): every reading and setting
    assert set(sweeper.params) == {f"memory.params.{k}" for k in (
        "S", "delta", "beta", "gamma", "theta", "lambda1", "lambda2", "lambda3", "tau_gate",
        "fan", "T")} | {f"memory.readings.{k}" for k in (
        "k_anchor", "rank_episodic_only", "energy", "inhibition", "inhibition_scope",
        "pagerank_scale", "fire_zero")}
    assert sweep.memory._target_.endswith("SynapseMemory")


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_overrides(experiment):
    cfg = make_cfg(f"experiment={experiment}")
    base = make_cfg("experiment=paper_main")
    assert cfg.experiment_name == experiment == cfg.task_name
    assert experiment in cfg.tags
    changed = {
        "no_gate": {"memory.params.tau_gate": 0.0},
        "beta0": {"memory.params.beta": 0.0},
        "no_fan": {"memory.params.fan": False},
        "no_decay": {"memory.params.delta": 0.0},
        "no_activation": {"memory.params.lambda2": 0.0, "memory.params.T": 0,
                          "memory.readings.c_ret_source": "similarity"},
        "no_graph": {"memory.use_graph": False},
    }.get(experiment, {})
    for key, value in changed.items():
        assert OmegaConf.select(cfg, key) == value, key
    if experiment == "vectors_only":
        assert cfg.memory._target_.endswith("VectorRAG")
    elif experiment in ("gaama_fused", "membox_fused", "membox_published"):
        assert cfg.memory._target_.endswith(("GAAMAMemory", "MemboxMemory"))
    elif experiment not in ("synapse_tuned", "synapse_strong", "synapse_fused"):  # own tests
        assert cfg.memory._target_.endswith("SynapseMemory")
        # nested experiments keep every other paper value of paper_main
        for key, _ in SPEC_HPARAMS.values():
            if key not in changed:
                assert OmegaConf.select(cfg, key) == OmegaConf.select(base, key), key


def test_membox_published_is_compact_at_ten_boxes():
    """Membox's published F1 (memory/membox/published.py MEMBOX: Compact, content top-k 10)
    against memory=membox, its code's default (trace mode, 5 boxes); the record of our build
    names it."""
    from synapse_pt.memory.membox import published as paper_numbers

    cfg, plain = make_cfg("experiment=membox_published"), make_cfg("memory=membox")
    assert (cfg.memory.mode, cfg.memory.k) == ("compact", 10)
    assert (plain.memory.mode, plain.memory.k) == ("trace", 5)
    assert (cfg.memory.mode, cfg.memory.k) == (paper_numbers.MEMBOX["mode"],
                                               paper_numbers.MEMBOX["top_k"])
    assert "experiment=membox_published" in paper_numbers.MEMBOX["our_build"]
    # every other Membox setting is the code's default
    for key in set(plain.memory) - {"mode", "k"}:
        assert OmegaConf.select(cfg.memory, key) == OmegaConf.select(plain.memory, key), key


def test_spec_hyperparameters_have_paper_defaults():
    cfg = make_cfg()
    for name, (key, value) in SPEC_HPARAMS.items():
        assert OmegaConf.select(cfg, key) == value, f"SPEC {name} = {key}"
    text = (CONFIG_DIR / "memory" / "synapse.yaml").read_text()
    lines = text.splitlines()
    for name, (key, _) in SPEC_HPARAMS.items():
        i = next(i for i, ln in enumerate(lines)
                 if ln.strip().startswith(key.rsplit(".", 1)[1] + ":"))
        # its meaning inline, or on the comment line above where it is too long for one line
        commented = "#" in lines[i] or lines[i - 1].strip().startswith("#")
        assert commented or name == "N", f"{key} has no comment"
    assert "SPEC's N is this `window`" in text


def test_defaults_run_offline():
    cfg = make_cfg()
    assert cfg.llm.name == "none" and cfg.logger.name == "none" and cfg.eval.mode == "retrieval"
    assert cfg.embedder.model.startswith("bundled:")
    assert cfg.extractor.llm_free


def test_dataset_path_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SYNAPSE_DATA", str(tmp_path / "locomo10.json"))
    assert make_cfg().dataset.path == str(tmp_path / "locomo10.json")
    assert make_cfg("dataset.path=/x/y.json").dataset.path == "/x/y.json"


@pytest.mark.parametrize("option", ["hashing", "minilm"])
def test_instantiate_embedders(option, tmp_path):
    from synapse_pt.models.base import TextEncoder

    cfg = make_cfg(f"embedder={option}", f"paths.cache_dir={tmp_path}")
    encoder = instantiate(cfg.embedder, _convert_="all")
    assert isinstance(encoder, TextEncoder)
    if option == "hashing":  # MiniLM loads its weights on first use (tests/models cover that)
        assert encoder.encode(["hello world"]).shape == (1, encoder.dim)
    else:
        assert encoder.dim == 384 and encoder._model is None


def test_mpnet_embedder_loads_by_path_from_the_cache_or_names_the_setup(tmp_path):
    """embedder=mpnet: the assembled folder under paths.cache_dir/models, the model's name in the
    embedding cache key; absent, a clear error with the set-up command (nothing downloads)."""
    from synapse_pt.commands.build import build_encoder
    from synapse_pt.models.assemble import ModelNotAssembled

    cfg = make_cfg("embedder=mpnet", f"paths.cache_dir={tmp_path}")
    assert cfg.embedder.model == f"{tmp_path}/models/all-mpnet-base-v2"
    assert cfg.embedder.cache_dir == f"{tmp_path}/embeddings"
    with pytest.raises(ModelNotAssembled, match="not assembled.*`make mpnet`"):
        build_encoder(cfg.embedder)
    folder = tmp_path / "models" / "all-mpnet-base-v2"  # a stand-in: config, empty weights
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"hidden_size": 768}')
    with pytest.raises(ModelNotAssembled, match="only partly assembled.*`make mpnet`"):
        build_encoder(cfg.embedder)  # no weights: an assembly stopped half-way
    (folder / "model.safetensors").write_bytes(b"")
    encoder = build_encoder(cfg.embedder)
    assert encoder.dim == 768 and encoder._model is None
    assert encoder.identity.startswith("all-mpnet-base-v2@")
    assert "max_length=384" in encoder.identity


@pytest.mark.parametrize("option", ["none", "smollm2", "openai", "vllm"])
def test_instantiate_llm_backends(option, tmp_path, monkeypatch):
    """Backends construct offline: weights load on first use, no request is sent."""
    from synapse_pt.commands.build import build_llm
    from synapse_pt.models.llm.base import LLM
    from synapse_pt.models.llm.none import NoLLM

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg = make_cfg(f"llm={option}", f"paths.cache_dir={tmp_path}")
    backend = instantiate(cfg.llm.backend, _convert_="all")
    assert isinstance(backend, LLM)
    assert isinstance(backend, NoLLM) == (option == "none")
    assert (build_llm(cfg.llm) is None) == (option == "none")


def test_llm_hf_needs_a_model(tmp_path):
    """``llm=hf`` without a model is an error, not the backend's default model."""
    from omegaconf.errors import MissingMandatoryValue

    from synapse_pt.commands.build import build_llm
    from synapse_pt.commands.run import run

    cfg = make_cfg("llm=hf")
    with pytest.raises(ValueError, match=r"llm=hf: no value for \['llm.backend.model'\]"):
        build_llm(cfg.llm)
    cfg = make_cfg("llm=hf", "dataset=sample", output_dir=str(tmp_path))
    with pytest.raises(MissingMandatoryValue, match="llm.backend.model"):
        run(cfg)
    cfg = make_cfg("llm=hf", "llm.backend.model=bundled:smollm2")
    assert instantiate(cfg.llm.backend, _convert_="all").model == "bundled:smollm2"


@pytest.mark.parametrize("option", [o for g, o in OPTIONS if g == "memory"])
def test_instantiate_memories(option):
    from synapse_pt.commands.build import build_extractor, build_memory
    from synapse_pt.memory.base import MemorySystem

    cfg = make_cfg(f"memory={option}", "embedder=hashing")
    encoder = instantiate(cfg.embedder, _convert_="all")
    memory = build_memory(cfg.memory, encoder=encoder,
                          extractor=build_extractor(cfg.extractor, encoder, None))
    assert isinstance(memory, MemorySystem)
    assert memory.describe()["memory"]


def test_synapse_memory_gets_every_param():
    from synapse_pt.commands.build import build_extractor, build_memory

    cfg = make_cfg("embedder=hashing", "memory.params.beta=0.33", "memory.graph.window=7")
    encoder = instantiate(cfg.embedder, _convert_="all")
    memory = build_memory(cfg.memory, encoder=encoder,
                          extractor=build_extractor(cfg.extractor, encoder, None))
    assert memory.params.beta == 0.33 and memory.builder.consolidation.window == 7
    for name, (key, _) in SPEC_HPARAMS.items():
        if key.startswith("memory.params."):
            assert getattr(memory.params, key.rsplit(".", 1)[1]) == OmegaConf.select(cfg, key), name


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_hyperparameters_pass_validation(experiment):
    from synapse_pt.retrieval.settings import SynapseParams

    cfg = make_cfg(f"experiment={experiment}")
    if cfg.memory._target_.endswith("SynapseMemory"):
        SynapseParams(**OmegaConf.to_container(cfg.memory.params, resolve=True))


def test_synapse_strong_changes_triggers_and_retrieval_only():
    strong, paper = make_cfg("experiment=synapse_strong"), make_cfg("experiment=paper_main")
    assert strong.memory.graph == paper.memory.graph and strong.extractor == paper.extractor
    assert dict(strong.memory.triggers) == {"neutralise_speakers": True, "stopwords": True,
                                            "stem": True}
    assert not any(paper.memory.triggers.values())  # the paper's triggers by default
    assert strong.memory.readings.rank_episodic_only and strong.memory.params.T == 2


def test_synapse_tuned_changes_retrieval_only():
    tuned, paper = make_cfg("experiment=synapse_tuned"), make_cfg("experiment=paper_main")
    assert tuned.memory.graph == paper.memory.graph and tuned.extractor == paper.extractor
    assert tuned.memory.params != paper.memory.params
    assert tuned.memory.readings.rank_episodic_only


GATES = sorted(f.stem for f in (CONFIG_DIR / "memory" / "gate").glob("*.yaml"))


@pytest.mark.parametrize("gate", GATES)
def test_every_gate_option_builds(gate):
    from synapse_pt.commands.build import build_memory
    from synapse_pt.memory.gate import GATE_SIGNALS

    cfg = make_cfg("memory=fused", f"memory/gate={gate}", "embedder=hashing")
    assert cfg.memory.gate.signal == gate and gate in GATE_SIGNALS
    memory = build_memory(cfg.memory, encoder=instantiate(cfg.embedder, _convert_="all"))
    assert memory.gate.signal == gate
    assert memory.gate.uses_turns == (gate != "c_ret")
    assert memory.describe()["gate"] == gate


def test_paper_gate_by_default_and_tuned_ships_the_fitted_one():
    paper, tuned = make_cfg("experiment=paper_main"), make_cfg("experiment=synapse_tuned")
    assert paper.memory.gate.signal == "c_ret" and paper.memory.params.tau_gate == 0.12
    assert make_cfg().memory.gate.signal == "c_ret"
    assert tuned.memory.gate.signal == "combined"
    assert set(tuned.memory.gate.weights) == {"speaker_share", "swap_contrast", "ownership",
                                              "ownership_contrast", "c_ret"}
    no_gate = make_cfg("experiment=no_gate")
    assert no_gate.memory.gate.signal == "c_ret" and no_gate.memory.params.tau_gate == 0.0


@pytest.mark.parametrize("option", ["gaama", "membox", "fused"])
def test_related_system_configs_name_every_hyperparameter(option):
    """Every constructor argument of the system is a config key (its value and source on record);
    the run passes the objects it builds (encoder, extractor, the text cache) itself."""
    import inspect

    from hydra.utils import get_class

    cfg = make_cfg(f"memory={option}")
    params = inspect.signature(get_class(cfg.memory._target_).__init__).parameters
    wanted = set(params) - {"self", "encoder", "extractor", "text_cache", "kwargs", "settings"}
    # the settings groups take the flat keys, one key per field
    groups = SETTINGS_GROUPS[option]
    wanted = (wanted - set(groups)) | {f.name for g in groups.values() for f in fields(g)}
    assert wanted <= set(cfg.memory), sorted(wanted - set(cfg.memory))


@pytest.mark.parametrize(("experiment", "key", "memory"),
                         [("synapse_fused", "fused_trigger", "fused"),
                          ("gaama_fused", "fused_seeds", "fused_search2"),
                          ("membox_fused", "fused_ranking", "fused_search2")])
def test_fused_stack_experiments_use_the_fused_configs_values(experiment, key, memory):
    """Each study's config carries exactly the values of the fused retriever it was run on:
    synapse_fused search 4's (memory=fused), the GAAMA and Membox runs search 2's."""
    fused = make_cfg(f"memory={memory}").memory
    cfg = make_cfg(f"experiment={experiment}")
    args = cfg.memory[key]
    for name in ("weights", "rho", "window", "stopwords", "stem", "bm25_k1", "bm25_b"):
        assert args[name] == fused[name], name
    assert args.get("sigma", 0.0) == fused.sigma


@pytest.mark.parametrize("option", sorted(p.stem for p in (CONFIG_DIR / "fusion").glob("*.yaml")))
def test_every_fusion_choice_is_composed_and_builds_the_fused_retriever(option):
    """Each file of fusion/ is the one place its weights live: some memory or experiment composes
    it, and it holds exactly the fused retriever's arguments."""
    import inspect

    from synapse_pt.memory.fused import FusedMemory

    users = [p for p in CONFIG_DIR.rglob("*.yaml") if "/fusion@" in p.read_text()
             and f": {option}" in p.read_text()]
    assert users, f"fusion/{option}.yaml is composed nowhere"
    values = OmegaConf.load(CONFIG_DIR / "fusion" / f"{option}.yaml")
    accepted = set(inspect.signature(FusedMemory.__init__).parameters) | {
        f.name for f in fields(SignalSettings)}
    assert set(values) <= accepted, sorted(set(values) - accepted)


@pytest.mark.parametrize("dataset", ["beam_100k", "beam_500k"])
@pytest.mark.parametrize("embedder", ["minilm", "mpnet"])
def test_beam_indexes_long_messages_as_windows_by_default(dataset, embedder):
    """Issue 42: every BEAM number on record was made with ``embedder.long_text=windows``, so the
    BEAM configs default to it (README's ``dataset=beam_100k`` command reproduces them); LoCoMo
    and REALTALK keep ``truncate``, as theirs were recorded; an explicit override still wins."""
    assert make_cfg(f"dataset={dataset}", f"embedder={embedder}").embedder.long_text == "windows"
    assert make_cfg(f"dataset={dataset}", f"embedder={embedder}",
                    "embedder.long_text=truncate").embedder.long_text == "truncate"
    for other in ("locomo10", "realtalk", "sample"):
        assert make_cfg(f"dataset={other}",
                        f"embedder={embedder}").embedder.long_text == "truncate"
