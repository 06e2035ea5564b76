"""The overview's figures and its one plot, drawn on the server as inline SVG from the
library's own answers (no plotting library, no script)."""

from __future__ import annotations

import html
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup

from sidecar.core import Sidecar
from sidecar.limits import CONSTRAINT_STATUSES
from sidecar.results import Activity, ConstraintView

BUCKETS = (
    (3600.0, "hour", "%H:00"),
    (86400.0, "day", "%m-%d"),
    (7 * 86400.0, "week", "%Y-%m-%d"),
)
MAX_BARS = 48
HOURS = 48
"""The overview's window of activity."""


@dataclass(frozen=True)
class Overview:
    hot_tools: int
    cold_tools: int
    archived_chains: int
    rules: int
    by_status: dict[str, int]
    by_kind: dict[str, int]
    sources: int
    sessions: int
    mandates: dict[str, int]
    ignored_contradictions: int
    pending_records: int
    plot: Markup
    plot_caption: str
    activity: Activity
    activity_plots: tuple[tuple[Markup, str], ...]


def overview(sc: Sidecar, now: float | None = None) -> Overview:
    status = sc.status(verify=False)
    views = sc.constraints(include_lifted=True)
    by_status = Counter(v.status for v in views)
    at = time.time() if now is None else now
    plot, caption = learning_plot(views, at)
    activity = sc.activity(HOURS, at)
    return Overview(
        hot_tools=status.active_tools,
        cold_tools=status.evicted_tools,
        archived_chains=status.chains,
        rules=len(views),
        by_status={s: by_status.get(s, 0) for s in CONSTRAINT_STATUSES},
        by_kind=dict(Counter(v.kind for v in views)),
        sources=len({s for v in views for s in v.sources}),
        sessions=sc.sessions_page(limit=1).total,
        mandates=sc.mandate_counts(),
        ignored_contradictions=status.ignored_contradictions,
        pending_records=status.pending_records,
        plot=plot,
        plot_caption=caption,
        activity=activity,
        activity_plots=activity_plots(activity),
    )


VERDICTS = (("allowed", "allowed"), ("warned", "warned"), ("blocked", "blocked"), ("held", "held"))
"""The calls' verdicts, stacked in this order, each its own colour (``.bar.<name>``)."""
SERIES = (
    ("sessions", "sessions first seen"),
    ("lookups", "lookups that named their session"),
    ("evicted", "tools evicted"),
)


def activity_plots(activity: Activity) -> tuple[tuple[Markup, str], ...]:
    """The calls per hour stacked by verdict, then one bar chart per series of
    :data:`SERIES` with anything to show; an hour a bar."""
    labels = [time.strftime("%H:00", time.gmtime(h.start)) for h in activity.hours]
    hours = len(activity.hours)
    out = []
    stacks = [[getattr(h, name) for name, _ in VERDICTS] for h in activity.hours]
    if any(map(any, stacks)):
        caption = f"calls per hour by verdict, the last {hours} hours (UTC)"
        out.append((stacked_chart(stacks, labels, [n for n, _ in VERDICTS], caption), caption))
    for field_name, words in SERIES:
        counts = [getattr(h, field_name) for h in activity.hours]
        if any(counts):
            caption = f"{words} per hour, the last {hours} hours (UTC)"
            out.append((bar_chart(counts, labels, caption), caption))
    return tuple(out)


def learning_plot(views: Sequence[ConstraintView], now: float) -> tuple[Markup, str]:
    """Rules learned per hour, day or week (the smallest that fits :data:`MAX_BARS`
    bars from the first rule to ``now``), as a bar chart."""
    if not views:
        return Markup(""), "no rule learned yet"
    first = min(v.valid_from or v.archived_at for v in views)
    width, unit, label = next((b for b in BUCKETS if (now - first) / b[0] < MAX_BARS), BUCKETS[-1])
    start = first - first % width
    bars = max(1, min(MAX_BARS, int((now - start) // width) + 1))
    start = max(start, now - now % width - (bars - 1) * width)
    counts = [0] * bars
    for v in views:
        at = int(((v.valid_from or v.archived_at) - start) // width)
        if 0 <= at < bars:
            counts[at] += 1
    caption = f"rules learned per {unit}, the last {bars} {unit}(s)"
    return bar_chart(
        counts, [time.strftime(label, time.gmtime(start + i * width)) for i in range(bars)], caption
    ), caption


def bar_chart(counts: Sequence[int], labels: Sequence[str], title: str) -> Markup:
    """A bar per count, its label under every few bars, the largest count on the axis."""
    w, h, left, bottom = 640, 180, 36, 24
    top = max(counts) or 1
    step = min(48.0, (w - left) / len(counts))  # a few bars stay bars, not a wall
    every = max(1, len(counts) // 8)
    parts = [
        f'<svg class="plot" viewBox="0 0 {w} {h}" role="img" '
        f'aria-label="{html.escape(title)}"><title>{html.escape(title)}</title>',
        f'<line x1="{left}" y1="{h - bottom}" x2="{w}" y2="{h - bottom}" class="axis"/>',
        f'<text x="{left - 4}" y="12" class="tick" text-anchor="end">{top}</text>',
        f'<text x="{left - 4}" y="{h - bottom}" class="tick" text-anchor="end">0</text>',
    ]
    for i, n in enumerate(counts):
        bar = (h - bottom - 8) * n / top
        x = left + i * step
        parts.append(
            f'<rect x="{x + 1:.1f}" y="{h - bottom - bar:.1f}" width="{max(step - 2, 1):.1f}" '
            f'height="{bar:.1f}" class="bar"><title>{html.escape(labels[i])}: {n}</title></rect>'
        )
        if i % every == 0:
            parts.append(
                f'<text x="{x + step / 2:.1f}" y="{h - 6}" class="tick" '
                f'text-anchor="middle">{html.escape(labels[i])}</text>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))


def stacked_chart(
    stacks: Sequence[Sequence[int]], labels: Sequence[str], names: Sequence[str], title: str
) -> Markup:
    """A bar per stack, its parts stacked bottom up in the order of ``names`` (each part
    of class ``bar <name>``), a legend above."""
    w, h, left, bottom, top_pad = 640, 200, 36, 24, 22
    top = max((sum(s) for s in stacks), default=0) or 1
    step = min(48.0, (w - left) / max(1, len(stacks)))
    every = max(1, len(stacks) // 8)
    parts = [
        f'<svg class="plot" viewBox="0 0 {w} {h}" role="img" '
        f'aria-label="{html.escape(title)}"><title>{html.escape(title)}</title>',
        f'<line x1="{left}" y1="{h - bottom}" x2="{w}" y2="{h - bottom}" class="axis"/>',
        f'<text x="{left - 4}" y="{top_pad + 4}" class="tick" text-anchor="end">{top}</text>',
        f'<text x="{left - 4}" y="{h - bottom}" class="tick" text-anchor="end">0</text>',
    ]
    for i, name in enumerate(names):
        key = left + i * 90
        parts.append(
            f'<rect x="{key}" y="4" width="10" height="10" class="bar {name}"/>'
            f'<text x="{key + 14}" y="13" class="tick">{html.escape(name)}</text>'
        )
    height = h - bottom - top_pad
    for i, stack in enumerate(stacks):
        x, base = left + i * step, float(h - bottom)
        for name, n in zip(names, stack, strict=True):
            if not n:
                continue
            bar = height * n / top
            base -= bar
            parts.append(
                f'<rect x="{x + 1:.1f}" y="{base:.1f}" width="{max(step - 2, 1):.1f}" '
                f'height="{bar:.1f}" class="bar {name}"><title>{html.escape(labels[i])}: '
                f"{n} {html.escape(name)}</title></rect>"
            )
        if i % every == 0:
            parts.append(
                f'<text x="{x + step / 2:.1f}" y="{h - 6}" class="tick" '
                f'text-anchor="middle">{html.escape(labels[i])}</text>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))
