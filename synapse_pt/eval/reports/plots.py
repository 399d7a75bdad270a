"""Plots of collected runs (matplotlib, headless): one grouped bar chart per metric."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from synapse_pt.eval.qa.aggregate import run_summary_names


def metric_frame(runs: Mapping[str, Mapping[str, Any]], metric: str,
                 columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Rows = runs, columns = categories (by category number) and both means, values of
    ``metric`` (fractions)."""
    rows = {}
    for label, m in runs.items():
        entry = m["metrics"].get(metric)
        if entry is None:
            raise KeyError(f"run {label!r} has no metric {metric!r}; has {sorted(m['metrics'])}")
        rows[label] = {k: v for k, v in entry.items() if k != "n"}
    frame = pd.DataFrame.from_dict(rows, orient="index").astype("float64")
    if columns is None:
        identity = next(iter(runs.values()))["identity"]
        first = identity.get("category_names", {})
        ordered = [first[k] for k in sorted(first, key=int)] + list(run_summary_names(identity))
        columns = [c for c in ordered if c in frame.columns]
        columns += [c for c in frame.columns if c not in columns]
    return frame[list(columns)]


def bar_chart(frame: pd.DataFrame, path: str | Path, *, title: str, ylabel: str) -> Path:
    """Grouped bars (one group per column, one bar per row) saved as PNG."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(frame.columns)), 4.0))
    (100 * frame.T).plot.bar(ax=ax, rot=20, width=0.8)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _finish(fig, path: str | Path) -> list[Path]:
    """Lay ``fig`` out, save it as PNG and as SVG beside it, close it; returns both paths."""
    fig.tight_layout()
    path = Path(path).with_suffix(".png")
    fig.savefig(path, dpi=130)
    fig.savefig(path.with_suffix(".svg"))
    _pyplot().close(fig)
    return [path, path.with_suffix(".svg")]


def roc_plot(roc: pd.DataFrame, path: str | Path, *, target_fr: float = 0.025,
             points: Mapping[str, tuple[float, float]] | None = None,
             marks: Mapping[str, tuple[float, float]] | None = None,
             title: str = "Rejection gates: ROC, category 5 against 1-4 (held out)") -> list[Path]:
    """ROC curves (``roc``: columns ``gate, false_rejection, true_rejection``, as
    :func:`synapse_pt.eval.tuning.gate_fit.roc_frame` writes them), the ``target_fr`` line, each
    gate's held-out operating point (``points``: ``{gate: (false rejection, true rejection)}``)
    and labelled extra operating points (``marks``: ``{label: (fr, tr)}``, e.g. the paper's
    ``tau_gate``)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 5.0))
    for gate, curve in roc.groupby("gate", sort=False):
        line, = ax.plot(curve["false_rejection"], curve["true_rejection"], label=gate, lw=1.4)
        if points and gate in points:
            ax.plot(*points[gate], "o", color=line.get_color(), ms=5)
    for (label, point), marker in zip((marks or {}).items(), "XPs^", strict=False):
        ax.plot(*point, marker, color="black", ms=8, label=label)
    ax.plot([0, 1], [0, 1], ":", color="grey", lw=0.8, label="chance")
    ax.axvline(target_fr, color="black", lw=0.8, ls="--", label=f"{100 * target_fr:g}% false "
               "rejection")
    ax.set_xlabel("false rejection (answerable questions gated)")
    ax.set_ylabel("true rejection (adversarial questions gated)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    return _finish(fig, path)


def budget_frame(runs: Mapping[str, Mapping[str, Any]], key: str | None = None
                 ) -> pd.DataFrame:
    """Rows = runs, columns = context-token budgets T (ints), values = ``recall@<T>tok`` at
    ``key`` (default: over the questions of the run's answerable categories, ``mean_q_1_4`` on
    LoCoMo)."""
    rows = {}
    for label, m in runs.items():
        at = key or run_summary_names(m["identity"])[1]
        rows[label] = {int(k[7:-3]): v.get(at) for k, v in m["metrics"].items()
                       if k.startswith("recall@") and k.endswith("tok")}
    frame = pd.DataFrame.from_dict(rows, orient="index").astype("float64")
    return frame[sorted(frame.columns)]


def budget_plot(frame: pd.DataFrame, path: str | Path, *,
                title: str = "Evidence recall within the first T context tokens (categories 1-4)"
                ) -> list[Path]:
    """One line per system: recall against the context-token budget (:func:`budget_frame`)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 4.8))
    colours = plt.get_cmap("tab20").colors
    styles = ("-", "--", "-.", ":")
    for i, (label, row) in enumerate(frame.iterrows()):
        ax.plot(row.index, 100 * row.values, marker="o", ms=3, lw=1.3, label=label,
                color=colours[i % len(colours)], ls=styles[(i // len(colours)) % len(styles)])
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks(list(frame.columns), [str(c) for c in frame.columns])
    ax.set_xlabel("context tokens T (MiniLM WordPiece)")
    ax.set_ylabel("evidence recall within T tokens (%)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6, ncol=1, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return _finish(fig, path)


def delta_frame(runs: Mapping[str, Mapping[str, Any]], baseline: str, metric: str
                ) -> pd.DataFrame:
    """Rows = the runs other than ``baseline``, columns = categories and both means: each run's
    ``metric`` minus the baseline's (fractions; :func:`metric_frame` layout)."""
    if baseline not in runs:
        raise KeyError(f"no run labelled {baseline!r} among {list(runs)}")
    frame = metric_frame(runs, metric)
    return frame.drop(index=baseline) - frame.loc[baseline]


def paper_deltas() -> pd.DataFrame:
    """The paper's reported ablation effects (F1 points, gpt-4o-mini): rows = configs, columns
    = the category (or average) each was reported on; NaN where the paper gives no full value."""
    from synapse_pt.eval.reports.paper_numbers import ABLATIONS

    rows: dict[str, dict[str, float]] = {}
    for a in ABLATIONS:
        if a["full"] is not None:
            rows.setdefault(a["config"], {})[a["metric"]] = a["ablated"] - a["full"]
    return pd.DataFrame.from_dict(rows, orient="index").astype("float64")


def ablation_delta_plot(deltas: pd.DataFrame, path: str | Path, *, metric: str,
                        baseline: str, key: str = "mean_q_1_4",
                        paper: pd.DataFrame | None = None) -> list[Path]:
    """Left: each ablation's change of ``metric`` (``key`` column of :func:`delta_frame`, in
    points) from ``baseline``. Right, when given: the paper's reported F1 change of the same
    config (:func:`paper_deltas`), on the category it reported. Different metrics: two panels,
    never one axis."""
    plt = _pyplot()
    panels = 2 if paper is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 0.45 * len(deltas) + 1.8),
                             squeeze=False)
    ours = 100 * deltas[key]
    ax = axes[0][0]
    ax.barh(ours.index, ours.values, color=["tab:red" if v < 0 else "tab:blue" for v in ours])
    ax.axvline(0, color="black", lw=0.8)
    ax.invert_yaxis()
    ax.set_xlabel(f"{metric} ({key}) minus {baseline}, points")
    ax.set_title(f"this framework: {metric}", fontsize=9)
    if paper is not None:
        ax2 = axes[0][1]
        rows = [c for c in deltas.index if c in paper.index]
        labels, values = [], []
        for config in rows:
            for col, v in paper.loc[config].dropna().items():
                labels.append(f"{config} ({col})")
                values.append(v)
        ax2.barh(labels, values, color=["tab:red" if v < 0 else "tab:blue" for v in values])
        ax2.axvline(0, color="black", lw=0.8)
        ax2.invert_yaxis()
        ax2.set_xlabel("F1 change reported by the paper, points (gpt-4o-mini)")
        ax2.set_title("SYNAPSE paper: F1", fontsize=9)
    return _finish(fig, path)


def paper_comparison_frame(runs: Mapping[str, Mapping[str, Any]],
                           metric: str = "f1_official") -> pd.DataFrame:
    """Rows = our runs (``metric``, fractions) then the SYNAPSE paper's Table 1 rows (official F1,
    percent / 100), columns = the five categories by name. Only the official F1 matches the
    paper's numbers; any other ``metric`` is refused."""
    from synapse_pt.eval.reports.paper_numbers import MAIN_F1, PAPER_CATEGORIES

    if metric != "f1_official":
        raise ValueError(f"the paper's numbers are official F1; {metric!r} does not match them")
    cats = list(PAPER_CATEGORIES)
    ours = metric_frame(runs, metric)
    rows = {label: {c: ours.loc[label].get(c) for c in cats} for label in ours.index}
    for system, values in MAIN_F1.items():
        rows[f"paper: {system}"] = {c: None if values.get(c) is None else values[c] / 100
                                    for c in cats}
    return pd.DataFrame.from_dict(rows, orient="index").astype("float64")[cats]


def paper_comparison_plot(frame: pd.DataFrame, path: str | Path, *,
                          title: str = "Official F1 per category: our runs beside the SYNAPSE "
                                       "paper's Table 1 (gpt-4o-mini)") -> list[Path]:
    """Grouped bars, one group per category: our runs solid, the paper's rows hatched."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.4, 4.6))
    n = len(frame)
    width = 0.8 / max(1, n)
    colours = plt.get_cmap("tab10").colors
    x = range(len(frame.columns))
    for i, (label, row) in enumerate(frame.iterrows()):
        paper = str(label).startswith("paper: ")
        ax.bar([j + (i - (n - 1) / 2) * width for j in x], 100 * row.fillna(0.0).values,
               width, label=label, color=colours[i % len(colours)],
               hatch="//" if paper else None, edgecolor="white" if paper else None)
    ax.set_xticks(list(x), list(frame.columns))
    ax.set_ylabel("F1 (%), official LoCoMo scorer")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    return _finish(fig, path)


def _loglog(ax, xlabel: str, ylabel: str, title: str) -> None:
    """Log-log axes with labels, a small title and a legend."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)


def scaling_plot(retrieval: Sequence[Mapping[str, Any]], ingestion: Sequence[Mapping[str, Any]],
                 exponents: Mapping[str, float], path: str | Path) -> list[Path]:
    """Log-log scaling curves of ``scripts/bench_scaling.py``'s rows: spreading-activation time
    against edges x queries (frontier and dense paths, one marker per memory size) and ingestion
    seconds per 1,000 turns against the conversation length, fitted exponents in the legends."""
    plt = _pyplot()
    fig, (ax_r, ax_i) = plt.subplots(1, 2, figsize=(10.5, 4.2))
    colours = plt.get_cmap("tab10").colors
    sizes = sorted({int(r["N"]) for r in retrieval})
    for path_name, style in (("auto", "-"), ("dense", "--")):
        rows = [r for r in retrieval if path_name in r]
        if not rows:
            continue
        exp = exponents.get(f"retrieval_{path_name}_vs_ExB")
        slope = "" if exp is None else f", slope {exp:.2f}"
        for k, n in enumerate(sizes):
            sel = sorted((r for r in rows if r["N"] == n), key=lambda r: r["B"])
            if not sel:
                continue
            if path_name == "auto":
                label = f"frontier, N = {n:,}"
            else:
                label = f"dense (dashed){slope}" if n == rows[0]["N"] else None
            ax_r.plot([r["E"] * r["B"] for r in sel], [r[path_name]["s"] for r in sel], style,
                      marker="o" if path_name == "auto" else "s", color=colours[k % 10],
                      label=label)
        if path_name == "auto" and exp is not None:
            ax_r.plot([], [], " ", label=f"frontier{slope}")
    _loglog(ax_r, "edges x queries (E x B)", "seconds per call (T = 3, best of runs)",
            "Spreading activation on synthetic memories")
    if ingestion:
        rows = sorted(ingestion, key=lambda r: r["turns"])
        exp = exponents.get("ingestion_total_vs_turns")
        ax_i.plot([r["turns"] for r in rows], [r["s_per_1000_turns"] for r in rows], "-o",
                  color=colours[0], label="total time exponent vs turns: "
                  + (f"{exp:.2f}" if exp is not None else "n/a"))
        _loglog(ax_i, "turns ingested", "seconds per 1,000 turns",
                "Ingestion (LLM-free keyword extractor, fixed embeddings)")
    return _finish(fig, path)


_EDGE_STYLE = {"temporal": ("-", "#555555"), "abstraction": ("--", "#1f77b4"),
               "association": (":", "#2ca02c")}


def activation_subgraph_plot(example: Any, path: str | Path) -> list[Path]:
    """One question's activated subgraph
    (:class:`~synapse_pt.eval.reports.activation_view.ActivationExample`): episodic nodes on a time
    line (conversation order), concept nodes in a row above at the mean position of the turns
    they link to; colour by node type, area by activation :math:`a(T)` (a dot for none), a
    ring for anchors, a red edge for evidence turns, the picked evidence turn labelled with its
    two ranks; temporal, abstraction and association edges drawn solid, dashed and dotted."""
    plt = _pyplot()
    nodes, edges = example.nodes, example.edges
    episodic = sorted((p for p, n in enumerate(nodes) if n["type"] == "episodic"),
                      key=lambda p: nodes[p]["turn_order"])
    xy: dict[int, tuple[float, float]] = {p: (float(i), 0.0) for i, p in enumerate(episodic)}
    linked: dict[int, list[float]] = {}
    for i, j, _, _ in edges:
        for a, b in ((i, j), (j, i)):
            if nodes[a]["type"] == "semantic" and b in xy:
                linked.setdefault(a, []).append(xy[b][0])
    semantic = [p for p, n in enumerate(nodes) if n["type"] == "semantic"]
    semantic.sort(key=lambda p: (sum(linked.get(p, [0.0])) / len(linked.get(p, [0.0])), p))
    span = max(1, len(episodic) - 1)
    for i, p in enumerate(semantic):
        xy[p] = (span * (i + 0.5) / max(1, len(semantic)), 1.0 + 0.18 * (i % 3))
    fig, ax = plt.subplots(figsize=(12, 5.6))
    for i, j, etype, w in edges:
        style, colour = _EDGE_STYLE[etype]
        (x0, y0), (x1, y1) = xy[i], xy[j]
        ax.plot([x0, x1], [y0, y1], style, color=colour, lw=0.6 + 1.6 * max(0.0, min(1.0, w)),
                alpha=0.55, zorder=1)
    for etype, (style, colour) in _EDGE_STYLE.items():
        ax.plot([], [], style, color=colour, label=f"{etype} edge")
    top = max([n["activation"] for n in nodes] + [1e-9])
    for p, n in enumerate(nodes):
        x, y = xy[p]
        colour = "#ff7f0e" if n["type"] == "semantic" else "#9467bd"
        size = 30 + 900 * n["activation"] / top if n["activation"] > 0 else 12
        ax.scatter([x], [y], s=size, color=colour, alpha=0.85, zorder=3,
                   edgecolors="red" if n["evidence"] else ("black" if n["anchor"] else "none"),
                   linewidths=2.4 if n["evidence"] else 1.2)
        label = n["key"] if n["type"] == "episodic" else n["text"][:20]
        ax.annotate(label, (x, y), textcoords="offset points",
                    xytext=(0, -14 if n["type"] == "episodic" else 9), ha="center", fontsize=6)
    t = nodes[example.target]
    tx, ty = xy[example.target]
    ax.annotate(f"evidence {t['key']}: SYNAPSE rank {t['synapse_rank'] + 1}, "
                f"cosine rank {t['cos_rank'] + 1}\n\"{t['text'][:70]}\"",
                (tx, ty), xytext=(0, -52), textcoords="offset points", ha="center", fontsize=7,
                color="darkred", arrowprops={"arrowstyle": "->", "color": "darkred"})
    for colour, name in (("#9467bd", "episodic node (turn)"), ("#ff7f0e", "semantic node")):
        ax.scatter([], [], s=60, color=colour, label=name)
    ax.scatter([], [], s=60, facecolors="none", edgecolors="black", label="anchor (a(0) > 0)")
    ax.scatter([], [], s=60, facecolors="none", edgecolors="red", linewidths=2,
               label="evidence turn")
    q = example.question
    ax.set_title(f"{q.key} (category {q.category}): \"{q.question[:90]}\"\n"
                 f"area = activation a(T); the evidence turn's rank gain from activation: "
                 f"{example.gain} places (top-{example.k} retrieval)", fontsize=8.5)
    ax.set_yticks([0.0, 1.15], ["episodes (conversation order)", "concepts"])
    ax.set_xticks([])
    ax.set_ylim(-0.9, 1.7)
    ax.legend(fontsize=7, loc="lower left", ncol=4)
    return _finish(fig, path)


def sweep_influence(table: pd.DataFrame, params: Sequence[str], metric: str,
                    bins: int = 8) -> pd.Series:
    r"""How much of ``metric``'s spread over a sweep each hyperparameter explains alone: the
    correlation ratio :math:`\eta^2 = \mathrm{Var}(\mathbb{E}[y \mid \mathrm{bin}(x)]) /
    \mathrm{Var}(y)` with ``x`` cut into ``bins`` equal-count bins (0: no effect, 1: ``y`` a
    function of ``x``; captures non-monotone effects a correlation misses). Sorted, largest
    first."""
    y = table[metric].astype("float64")
    total = float(((y - y.mean()) ** 2).mean())
    out = {}
    for p in params:
        groups = pd.qcut(table[p].rank(method="first"), q=min(bins, len(table)), labels=False)
        means = y.groupby(groups).transform("mean")
        out[p] = float(((means - y.mean()) ** 2).mean()) / total if total > 0 else 0.0
    return pd.Series(out).sort_values(ascending=False)


def sweep_landscape_plot(table: pd.DataFrame, params: Sequence[str], metric: str,
                         path: str | Path, *, bins: int = 8) -> list[Path]:
    """``metric`` over the two hyperparameters of a sweep that explain most of it alone
    (:func:`sweep_influence`): the mean of ``metric`` in a ``bins x bins`` grid of the two
    (colour), every configuration as a dot, the best one starred; the influence of every
    hyperparameter in a side panel."""
    plt = _pyplot()
    influence = sweep_influence(table, params, metric, bins)
    px, py = influence.index[:2]
    fig, (ax, ax_i) = plt.subplots(1, 2, figsize=(11, 4.6),
                                   gridspec_kw={"width_ratios": [2.2, 1]})
    xe = pd.Series(table[px]).quantile([i / bins for i in range(bins + 1)]).to_numpy()
    ye = pd.Series(table[py]).quantile([i / bins for i in range(bins + 1)]).to_numpy()
    xi = pd.cut(table[px], xe, labels=False, include_lowest=True, duplicates="drop")
    yi = pd.cut(table[py], ye, labels=False, include_lowest=True, duplicates="drop")
    grid = table.assign(_x=xi, _y=yi).pivot_table(index="_y", columns="_x", values=metric,
                                                  aggfunc="mean")
    mesh = ax.pcolormesh(xe[: grid.shape[1] + 1], ye[: grid.shape[0] + 1], 100 * grid.to_numpy(),
                         cmap="viridis", shading="flat")
    fig.colorbar(mesh, ax=ax, label=f"mean {metric} (%) in the cell")
    ax.scatter(table[px], table[py], s=6, color="white", alpha=0.6)
    best = table[metric].idxmax()
    ax.scatter([table.loc[best, px]], [table.loc[best, py]], marker="*", s=220, color="red",
               label=f"best: {100 * table.loc[best, metric]:.1f} %")
    ax.set_xlabel(px)
    ax.set_ylabel(py)
    ax.legend(fontsize=7, loc="upper right")
    ax.set_title(f"{metric} over {len(table):,} configurations: the two most influential "
                 "hyperparameters", fontsize=9)
    ax_i.barh(list(influence.index)[::-1], list(influence.to_numpy())[::-1], color="#1f77b4")
    ax_i.set_xlabel("share of the spread explained alone (eta^2)")
    ax_i.set_title("influence of each hyperparameter", fontsize=9)
    return _finish(fig, path)


def signal_distribution_plot(per_q: pd.DataFrame, signals: Sequence[str], path: str | Path, *,
                             thresholds: Mapping[str, float] | None = None) -> list[Path]:
    """Histograms of each gate signal (a column of ``per_q``), adversarial questions (category
    5) against answerable ones (1-4), one panel per signal (four to a row), densities on shared
    bins; an
    optional threshold per signal drawn as a line."""
    plt = _pyplot()
    ncols = min(4, len(signals))
    nrows = -(-len(signals) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.4 * nrows), squeeze=False)
    for ax in axes.flat[len(signals):]:
        ax.set_visible(False)
    adversarial = per_q["category"].astype(int) == 5
    for ax, sig in zip(axes.flat, signals, strict=False):
        values = per_q[sig].astype("float64")
        lo, hi = float(values.min()), float(values.max())
        bins = [lo + (hi - lo) * i / 30 for i in range(31)] if hi > lo else 10
        ax.hist(values[~adversarial], bins=bins, density=True, alpha=0.6, label="categories 1-4")
        ax.hist(values[adversarial], bins=bins, density=True, alpha=0.6,
                label="category 5 (adversarial)")
        if thresholds and sig in thresholds:
            ax.axvline(thresholds[sig], color="black", ls="--", lw=1,
                       label=f"threshold {thresholds[sig]:g}")
        ax.set_xlabel(sig)
        ax.set_ylabel("density")
        ax.legend(fontsize=7)
    fig.suptitle("Gate signals: adversarial against answerable questions", fontsize=9)
    return _finish(fig, path)
