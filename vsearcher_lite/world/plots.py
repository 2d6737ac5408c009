"""Figures of a world, for notebook 00 (plotly; built from the world's own tables)."""

from __future__ import annotations

from collections import Counter


def rarity_figure(stats: list[dict], sitelinks_max: int | None = None,
                  statements_min: int | None = None):
    """Sitelinks x statements of every entity, with the seed region (paper 2.1) shaded."""
    import plotly.graph_objects as go

    fig = go.Figure()
    by_type: dict[str, list[dict]] = {}
    for s in stats:
        by_type.setdefault(s["type"], []).append(s)
    for type_, rows in sorted(by_type.items()):
        fig.add_trace(
            go.Scattergl(
                x=[r["sitelinks"] + 1 for r in rows],
                y=[r["statements"] for r in rows],
                mode="markers",
                name=type_,
                marker={"size": 4, "opacity": 0.6},
                text=[r["id"] for r in rows],
            )
        )
    if sitelinks_max is not None and statements_min is not None:
        top = max((s["statements"] for s in stats), default=statements_min) * 1.2
        fig.add_shape(
            type="rect", x0=1, x1=sitelinks_max + 1, y0=statements_min, y1=top,
            line={"color": "black", "dash": "dash"}, fillcolor="rgba(0,0,0,0.05)",
        )
        region = f"seed region: sitelinks <= {sitelinks_max}, statements >= {statements_min}"
        fig.add_annotation(x=0, y=1.02, xref="paper", yref="paper", showarrow=False,
                           xanchor="left", text=region)
    fig.update_layout(
        title="Entities by sitelinks and statements",
        xaxis={"title": "sitelinks + 1", "type": "log"},
        yaxis={"title": "statements", "type": "log"},
        height=450,
    )
    return fig


def entity_types_figure(stats: list[dict]):
    """How many entities of each type, split into those with and without an image."""
    import plotly.graph_objects as go

    with_image = Counter(s["type"] for s in stats if s.get("has_image"))
    without = Counter(s["type"] for s in stats if not s.get("has_image"))
    types = sorted(set(with_image) | set(without), key=lambda t: -(with_image[t] + without[t]))
    fig = go.Figure(
        [
            go.Bar(name="with image", x=types, y=[with_image[t] for t in types]),
            go.Bar(name="no image", x=types, y=[without[t] for t in types]),
        ]
    )
    fig.update_layout(barmode="stack", title="Entity types", yaxis={"title": "entities"},
                      height=380)
    return fig
