"""The report's plots, each a function of plain rows that returns one inline SVG string (no network, no
JavaScript): dev scores over the iterations, the frontier over two objectives, per-category test scores,
training curves. The lineage tree is in :mod:`evolver_ui.lineage`.

matplotlib's SVG backend draws them through ``Figure`` objects, never pyplot, so nothing global changes
and a server can draw from several threads. Artists carry ids (``gid``) that tests and a browser can find:
``dev-admitted``, ``frontier-members``, ``frontier-dominated``, ...
"""
from __future__ import annotations

import io
import re

import matplotlib
from matplotlib.figure import Figure

ADMITTED, REJECTED, PROBE, SEED, MUTED = "#1a7f37", "#cf222e", "#bc4c00", "#24292f", "#8c959f"
SERIES = ("#8c959f", "#0969da", "#1a7f37", "#8250df", "#bc4c00")


def figure(width: float = 7.0, height: float = 3.6) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def to_svg(fig: Figure, name: str) -> str:
    """The figure as an ``<svg>`` element for inlining: no XML prolog, no DOCTYPE or metadata (they name
    URLs), text kept as text, ids salted with ``name`` so two plots on one page never share one."""
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": name, "font.size": 9}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)
    return svg.replace("<svg ", f'<svg class="plot" data-plot="{name}" ', 1)


def dev_scores(points: list[dict], seed: float | None, rejected: int = 0) -> str:
    """Every candidate's dev score by iteration. ``points``: ``{"id", "iteration", "score", "status"}`` with
    status ``admitted``, ``discarded`` or ``probe`` (stopped after the probe: its probe score). The seed's
    dev score is a dashed line, the best admitted so far a step line."""
    fig = figure()
    ax = fig.add_subplot()
    if seed is not None:
        ax.axhline(seed, color=SEED, linestyle="--", linewidth=1, label=f"seed ({seed:.3f})", gid="dev-seed")
    styles = {"admitted": dict(marker="o", color=ADMITTED, label="admitted"),
              "discarded": dict(marker="x", color=REJECTED, label="not admitted"),
              "probe": dict(marker="v", color=PROBE, label="stopped after the probe (probe score)")}
    for status, style in styles.items():
        pts = [p for p in points if p["status"] == status]
        if pts:
            ax.scatter([p["iteration"] for p in pts], [p["score"] for p in pts], s=36, zorder=3,
                       gid=f"dev-{status}", **style)
    admitted = sorted((p["iteration"], p["score"]) for p in points if p["status"] == "admitted")
    if admitted:
        best, xs, ys = seed if seed is not None else admitted[0][1], [], []
        for it, score in admitted:
            best = max(best, score)
            xs.append(it)
            ys.append(best)
        last = max(p["iteration"] for p in points)
        ax.step([xs[0], *xs, last], [ys[0], *ys, ys[-1]], where="post", color=ADMITTED, alpha=0.4,
                linewidth=1.5, label="best admitted so far", gid="dev-best")
    ax.set_xlabel("iteration")
    ax.set_ylabel("dev score")
    ax.xaxis.get_major_locator().set_params(integer=True)
    if rejected:
        ax.set_title(f"{rejected} more rejected before playing (no dev score)", fontsize=8, color=MUTED, loc="left")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")
    return to_svg(fig, "dev-scores")


def frontier(points: dict[str, dict], members: list[str], x: str, y: str) -> str:
    """Programs over two objectives (``"name:max"``/``"name:min"``), the frontier's members marked and the
    region they dominate (worse on both) shaded. ``points``: program id -> its dev metrics."""
    (xn, xd), (yn, yd) = (_objective(x), _objective(y))
    pts = {pid: (m[xn], m[yn]) for pid, m in points.items() if m.get(xn) is not None and m.get(yn) is not None}
    fig = figure(6.0, 4.2)
    ax = fig.add_subplot()
    if pts:
        xs, ys = [v[0] for v in pts.values()], [v[1] for v in pts.values()]
        xlo, xhi = _limits(xs)
        ylo, yhi = _limits(ys)
        ax.set_xlim(xlo, xhi)
        ax.set_ylim(ylo, yhi)
        # What a member dominates: worse on both objectives, i.e. towards the far corner from its best.
        for i, pid in enumerate(m for m in members if m in pts):
            px, py = pts[pid]
            x_end = xlo if xd == "max" else xhi
            y_end = ylo if yd == "max" else yhi
            ax.fill([px, x_end, x_end, px], [py, py, y_end, y_end], color="#ddf4ff", linewidth=0, zorder=0,
                    gid="frontier-dominated", label="dominated by the frontier" if i == 0 else None)
        others = [p for p in pts if p not in members]
        if others:
            ax.scatter([pts[p][0] for p in others], [pts[p][1] for p in others], color=MUTED, s=30, zorder=2,
                       label="other programs", gid="frontier-others")
        on = [p for p in members if p in pts]
        ax.scatter([pts[p][0] for p in on], [pts[p][1] for p in on], color=ADMITTED, s=60, zorder=3,
                   edgecolors=SEED, label="frontier", gid="frontier-members")
        for pid, (px, py) in pts.items():
            ax.annotate(pid, (px, py), textcoords="offset points", xytext=(5, 4), fontsize=7, zorder=4)
        ax.legend(fontsize=8, loc="best")
    ax.set_xlabel(f"{xn} ({'higher' if xd == 'max' else 'lower'} is better)")
    ax.set_ylabel(f"{yn} ({'higher' if yd == 'max' else 'lower'} is better)")
    return to_svg(fig, "frontier")


def categories(series: dict[str, dict[str, float]]) -> str:
    """Grouped bars: per category, one bar per program (``series``: label -> category -> test score)."""
    cats = sorted({c for s in series.values() for c in s})
    fig = figure(max(5.0, 1.1 * len(cats) * max(1, len(series)) / 2 + 2), 3.4)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(series))
    for i, (label, scores) in enumerate(series.items()):
        xs = [k + (i - (len(series) - 1) / 2) * width for k in range(len(cats))]
        ax.bar(xs, [scores.get(c, 0.0) for c in cats], width, label=label, color=SERIES[i % len(SERIES)],
               gid=f"categories-{i}")
    ax.set_xticks(range(len(cats)), cats, rotation=30 if len(cats) > 6 else 0, ha="right" if len(cats) > 6 else "center")
    ax.set_ylabel("test score")
    ax.set_ylim(0, 1.05 if all(v <= 1 for s in series.values() for v in s.values()) else None)
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(series), frameon=False)
    return to_svg(fig, "categories")


#: The training panels: (title, metric, which runs). SFT runs log ``loss`` without ``reward_mean``.
PANELS = (("SFT loss", "loss", "sft"), ("GRPO reward (mean ± std)", "reward_mean", "grpo"),
          ("GRPO KL", "kl", "grpo"), ("GRPO clip fraction", "clip_frac", "grpo"))


def training(runs: dict[str, list[dict]], prefix: str = "") -> str | None:
    """The training curves of each training run (``runs``: run id -> its steps' metrics); one panel per
    metric that some run logged. None when no run logged any."""
    kinds = {rid: "grpo" if any("reward_mean" in r for r in rows) else "sft" for rid, rows in runs.items()}
    panels = [(title, key, kind) for title, key, kind in PANELS
              if any(kinds[rid] == kind and any(key in r for r in rows) for rid, rows in runs.items())]
    if not panels:
        return None
    fig = figure(7.0, 2.4 * ((len(panels) + 1) // 2))
    axes = fig.subplots((len(panels) + 1) // 2, 2, squeeze=False).flat
    for (title, key, kind), ax in zip(panels, axes):  # panels first: zip must not take an axis it leaves
        for i, (rid, rows) in enumerate((r, rows) for r, rows in runs.items() if kinds[r] == kind):
            rows = [r for r in rows if key in r]
            steps, vals = [r["step"] for r in rows], [r[key] for r in rows]
            color = SERIES[1 + i % (len(SERIES) - 1)]
            ax.plot(steps, vals, color=color, linewidth=1.2, marker="." if len(rows) < 30 else None,
                    label=rid.removeprefix(prefix), gid=f"train-{key}")
            if key == "reward_mean":
                std = [r.get("reward_std", 0.0) for r in rows]
                ax.fill_between(steps, [v - s for v, s in zip(vals, std)], [v + s for v, s in zip(vals, std)],
                                color=color, alpha=0.2, linewidth=0)
        ax.set_title(title, fontsize=9, loc="left")
        ax.set_xlabel("step")
        ax.legend(fontsize=7, loc="best")
    for ax in list(axes):  # an odd number of panels leaves one empty
        ax.set_visible(False)
    return to_svg(fig, "training")


def _objective(spec: str) -> tuple[str, str]:
    name, _, direction = spec.partition(":")
    return name, direction or "max"


def _limits(values: list[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.12 or max(abs(hi) * 0.12, 0.1)
    return lo - pad, hi + pad
