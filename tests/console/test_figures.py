"""The overview's plot: rules learned per hour, day or week, drawn as SVG on the server."""

from __future__ import annotations

from sidecar.results import ConstraintView
from sidecar.shells.console.figures import MAX_BARS, bar_chart, learning_plot

NOW = 1_800_000_000.0  # a fixed clock: no test waits on or reads the real one


def _view(at: float, n: int = 0) -> ConstraintView:
    return ConstraintView(
        chain_id=f"r{n}",
        sequence=("a", "b"),
        rule="",
        expected_failure="boom",
        pointer=None,
        status="active",
        archived_at=at,
        valid_from=at,
    )


def test_no_rule_no_plot() -> None:
    plot, caption = learning_plot([], NOW)
    assert str(plot) == "" and caption == "no rule learned yet"


def test_rules_of_the_last_hours_are_counted_per_hour() -> None:
    views = [_view(NOW - h * 3600, h) for h in (0, 0, 1, 5)]
    plot, caption = learning_plot(views, NOW)
    assert "per hour" in caption
    bars = str(plot).count("<rect")
    assert bars == 6  # from the first rule's hour to now
    assert ": 2</title>" in str(plot)  # the current hour holds two


def test_an_older_home_is_counted_per_day_or_week_in_few_bars() -> None:
    days = learning_plot([_view(NOW - 30 * 86400), _view(NOW, 1)], NOW)
    assert "per day" in days[1] and str(days[0]).count("<rect") <= MAX_BARS
    weeks = learning_plot([_view(NOW - 200 * 86400), _view(NOW, 1)], NOW)
    assert "per week" in weeks[1] and str(weeks[0]).count("<rect") <= MAX_BARS


def test_labels_are_escaped() -> None:
    svg = str(bar_chart([0, 1], ["<a>", "b"], "x & y"))
    assert "<a>" not in svg and "&lt;a&gt;" in svg and "x &amp; y" in svg
