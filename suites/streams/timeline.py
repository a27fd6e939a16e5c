"""The streams suite's timeline: one row per stream, one bar per copy or kernel, as the pipeline ran."""

from __future__ import annotations

from pathlib import Path

from kbench import plots
from kbench.errors import UserError

TIMELINES_DIR = Path("results") / "timelines"


def timeline_path(name: str, folder: Path = TIMELINES_DIR) -> Path:
    """results/timelines/NAME.png, NAME reduced to letters, digits, '.', '_' and '-'; a path that
    would land outside the folder is refused (UserError)."""
    from kbench.profilers.common import inside, safe_label

    path = Path(folder) / f"{safe_label(name)}.png"
    if not inside(path, folder):
        raise UserError(f"{str(path)!r} would be written outside {folder}/")
    return path


def timeline_plot(lanes: list[str], bars: list[tuple], path: Path, title: str = "",
                  lines: dict[str, float] | None = None, unit: str = "ms") -> list[Path]:
    """A timeline: one row per lane (a stream), one bar per (lane, kind, start, end, label),
    coloured by kind, the label written inside bars wide enough to hold it; ``lines`` adds labelled
    vertical lines (e.g. the ideal end). Written as PNG and SVG."""
    plt = plots.pyplot()
    if not bars:
        raise UserError("a timeline needs at least one bar")
    kinds = list(dict.fromkeys(bar[1] for bar in bars))
    colours = plt.get_cmap("tab10")
    colour = {kind: colours(i % 10) for i, kind in enumerate(kinds)}
    end = max(bar[3] for bar in bars)
    start = min(bar[2] for bar in bars)
    span = max(end - start, 1e-12)
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.55 * len(lanes)))
    seen = set()
    for lane, kind, begin, finish, *label in bars:
        ax.barh(lane, finish - begin, left=begin, height=0.6, color=colour[kind], edgecolor="black", linewidth=0.3,
                label=None if kind in seen else kind)
        seen.add(kind)
        if label and label[0] and (finish - begin) > 0.025 * span:
            ax.text((begin + finish) / 2, lane, label[0], ha="center", va="center", fontsize=6)
    for i, (name, at) in enumerate((lines or {}).items()):
        ax.axvline(at, color="black", ls="--" if i == 0 else ":", lw=1)
        # The first label left of its line, the others right of theirs: close lines stay readable.
        ax.text(at, len(lanes) - 0.45, f" {name} ", fontsize=7, va="bottom", ha="right" if i == 0 else "left")
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(lanes)
    ax.set_ylim(len(lanes) - 0.4, -0.6)  # the first lane on top
    ax.set_xlim(min(start, 0.0), max([end] + list((lines or {}).values())) + 0.02 * span)
    ax.set_xlabel(unit)
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    written = plots.save(fig, path)
    plt.close(fig)
    return written
