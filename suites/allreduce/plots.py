"""The allreduce suite's plot: nccl-tests' bandwidths against the message size (`kbench plot --metric busbw`)."""

from __future__ import annotations

from pathlib import Path

from kbench import plots
from kbench.errors import UserError


def bandwidth_plot(records: list, path: Path, metric: str = "busbw") -> list[Path]:
    """busbw (or algbw) against the message size, one colour per implementation (and per number of ranks
    when that varies): solid the op alone (nccl-tests' method), dotted kbench's median of the closure."""
    from kbench.suite import format_size

    key = f"{metric}_gbps"
    ok = [r for r in records if r.ok and r.figures.get(key) is not None]
    if not ok:
        raise UserError(f"no OK records with a measured {metric} to plot (an allreduce run's results file)")
    plt = plots.pyplot()
    from matplotlib.ticker import FuncFormatter

    ranks_vary = len({r.figures.get("world_size") for r in ok}) > 1
    lines: dict[str, dict[str, list]] = {}
    for r in ok:
        name = r.name
        if ranks_vary:
            name += f" ({r.figures.get('world_size')} ranks)"
        line = lines.setdefault(name, {"alone": [], "closure": []})
        size = r.figures.get("bytes") or r.case.get("bytes")
        line["closure"].append((size, r.figures[key]))
        if r.figures.get(f"alone_{key}") is not None:
            line["alone"].append((size, r.figures[f"alone_{key}"]))
    fig, ax = plt.subplots(figsize=(9, 6))
    colours = plt.get_cmap("tab10")
    for i, (name, line) in enumerate(sorted(lines.items())):
        colour = colours(i % 10)
        for kind, style, label in (("alone", "-", f"{name}: op alone"), ("closure", ":", f"{name}: kbench closure")):
            xy = sorted(line[kind])
            if xy:
                ax.plot([a for a, _ in xy], [b for _, b in xy], marker="o", ls=style, color=colour, label=label)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_size(int(v)) if v >= 1 and float(v).is_integer()
                                               else f"{v:g}"))
    ax.set_xlabel("message size")
    ax.set_ylabel(f"{metric} (GB/s)")
    suite = ok[0].suite
    ax.set_title(f"{suite}: {metric} against message size ({metric} = "
                 + ("bytes / time x 2(N-1)/N" if metric == "busbw" else "bytes / time") + ")")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    written = plots.save(fig, path)
    plt.close(fig)
    return written
