"""The lineage of a run's programs as a tree (the seed at the left, each generation one column further
right), drawn to an inline SVG: operator and proposer on each edge, admitted programs highlighted, the
frontier's members at the end in bold. Each node's group has the id ``lineage-<status>-<program id>``.
"""
from __future__ import annotations

from evolver_ui.plots import ADMITTED, MUTED, REJECTED, SEED, figure, to_svg

#: status -> (fill, edge): admitted stand out, the rest stay quiet.
STYLE = {"seed": ("#eaeef2", SEED), "admitted": ("#dafbe1", ADMITTED), "discarded": ("#ffffff", MUTED),
         "rejected": ("#ffebe9", REJECTED)}


def layout(nodes: list[dict]) -> dict[str, tuple[int, int]]:
    """Program id -> (depth, row): depth from the root, rows in depth-first order (a parent on its first
    child's row). A node whose parent is unknown is a root of its own."""
    ids = {n["id"] for n in nodes}
    children: dict[str | None, list[str]] = {}
    for n in nodes:
        parent = n.get("parent") if n.get("parent") in ids and n.get("parent") != n["id"] else None
        children.setdefault(parent, []).append(n["id"])
    pos: dict[str, tuple[int, int]] = {}
    row = 0

    def place(pid: str, depth: int) -> None:
        nonlocal row
        pos[pid] = (depth, row)
        kids = [k for k in children.get(pid, []) if k not in pos]
        if not kids:
            row += 1
        for k in kids:
            place(k, depth + 1)

    for root in children.get(None, []):
        place(root, 0)
    for n in nodes:  # a cycle (corrupt rows) leaves nodes unplaced: show them anyway
        if n["id"] not in pos:
            place(n["id"], 0)
    return pos


def lineage(nodes: list[dict]) -> str:
    """``nodes``: ``{"id", "parent", "status", "member", "operator", "proposer", "dev"}``; status is ``seed``,
    ``admitted``, ``discarded`` or ``rejected``; ``member``: on the frontier at the end; ``dev``: its dev
    score or None."""
    pos = layout(nodes)
    depth = max((d for d, _ in pos.values()), default=0)
    rows = max((r for _, r in pos.values()), default=0) + 1
    fig = figure(1.9 * (depth + 1) + 0.6, 0.42 * rows + 0.5)
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_xlim(-0.4, depth + 0.6)
    ax.set_ylim(rows - 0.5, -0.6)
    for n in nodes:
        parent = n.get("parent")
        if parent not in pos or parent == n["id"]:
            continue
        (px, py), (cx, cy) = pos[parent], pos[n["id"]]
        mid = px + 0.45
        ax.plot([px, mid, mid, cx], [py, py, cy, cy], color=MUTED, linewidth=0.8, zorder=1,
                gid=f"lineage-edge-{n['id']}")
        label = " · ".join(filter(None, [n.get("operator"), n.get("proposer")]))
        ax.text(mid + 0.05, cy - 0.12, label, fontsize=6.5, color=MUTED, va="bottom", ha="left", zorder=2)
    for n in nodes:
        x, y = pos[n["id"]]
        fill, edge = STYLE.get(n["status"], STYLE["discarded"])
        dev = n.get("dev")
        ax.text(x, y, n["id"] + ("" if dev is None else f"  {dev:.3f}"), fontsize=7.5, ha="left", va="center",
                fontweight="bold" if n.get("member") else "normal", zorder=3, gid=f"lineage-{n['status']}-{n['id']}",
                bbox=dict(boxstyle="round,pad=0.3", facecolor=fill, edgecolor=edge,
                          linewidth=2.0 if n.get("member") else 0.8))
    return to_svg(fig, "lineage")
