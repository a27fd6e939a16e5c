"""Pictures of results: the roofline, throughput against size for a sweep, and a case over runs.

Each figure is written twice, as PNG and SVG, next to the path asked for (the HTML report's: SVG only).
matplotlib is imported here only (an optional dependency: `pip install kbench[plot]`).
"""

from __future__ import annotations

from pathlib import Path

from kbench.errors import UserError
from kbench.record import Record


def pyplot():
    """matplotlib's pyplot, drawing to files only; UserError when matplotlib is missing (suites' plots use it too)."""
    try:
        import matplotlib
    except ImportError:
        raise UserError("plots need matplotlib: pip install 'kbench[plot]' (or matplotlib)") from None
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path, suffixes: tuple[str, ...] = (".png", ".svg")) -> list[Path]:
    """Write ``fig`` as PATH.png and PATH.svg (or the ``suffixes`` given); UserError when a file cannot be written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for suffix in suffixes:
        target = path.with_suffix(suffix)
        try:
            fig.savefig(target, dpi=150, bbox_inches="tight")
        except OSError as exc:
            raise UserError(f"cannot write {str(target)!r}: {exc.strerror or exc}") from None
        written.append(target)
    return written


ANNOTATE_AT_MOST = 12  # beyond this many points, labels overlap: colours and a legend instead


def roofline_plot(points, peaks, path: Path, title: str = "", calibration: dict | None = None,
                  suffixes: tuple[str, ...] = (".png", ".svg")) -> list[Path]:
    """Log-log roofline: the memory roof, each compute ceiling present, one point per result,
    coloured by implementation. Points above their roof are red crosses marked invalid."""
    import numpy as np

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 6.5))
    intensities = [p.intensity for p in points] or [1.0]
    ceilings = sorted({(p.roof_label, p.compute_tflops) for p in points if p.compute_tflops},
                      key=lambda c: -c[1]) or [("fp16 tensor cores", peaks.tflops["fp16"])]
    top = ceilings[0][1]
    lo = min(min(intensities) / 4, 0.5)
    hi = max(max(intensities) * 4, 2 * top / peaks.hbm_tbs)
    x = np.logspace(np.log10(lo), np.log10(hi), 400)
    memory = x * peaks.hbm_tbs
    ax.plot(x[memory <= 1.5 * top], memory[memory <= 1.5 * top], color="black", lw=1, ls="--",
            label=f"HBM {peaks.hbm_tbs:g} TB/s")
    for label, tflops in ceilings:
        ax.plot(x, np.minimum(tflops, memory), lw=2,
                label=f"{label}: {tflops:g} TFLOP/s (ridge {tflops / peaks.hbm_tbs:.0f} FLOP/B)")
    if calibration:  # measured ceilings (kbench calibrate), dotted beside the datasheet's
        measured_memory = x * calibration["hbm_tbs"]
        for label, key in (("measured fp16 tensor", "fp16_tensor_tflops"), ("measured fp32", "fp32_tflops")):
            ax.plot(x, np.minimum(calibration[key], measured_memory), lw=1.2, ls=":",
                    label=f"{label}: {calibration[key]:.0f} TFLOP/s, {calibration['hbm_tbs']:.2f} TB/s")
    colours = plt.get_cmap("tab10")
    labels = sorted({p.label for p in points})
    annotate = len(points) <= ANNOTATE_AT_MOST
    for i, name in enumerate(labels):
        mine = [p for p in points if p.label == name]
        good = [p for p in mine if p.valid]
        if good:
            ax.scatter([p.intensity for p in good], [p.attained_tflops for p in good], s=36, zorder=3,
                       color=colours(i % 10), label=name)
        for p in mine:
            if not p.valid:
                ax.scatter(p.intensity, p.attained_tflops, marker="x", color="red", s=90, zorder=4,
                           label=f"{name}: INVALID (above the roof)")
            if annotate or not p.valid:
                ax.annotate(f"{p.label} {p.pct_of_roof:.0f}%" + ("" if p.valid else " INVALID"),
                            (p.intensity, p.attained_tflops), textcoords="offset points", xytext=(5, 4),
                            fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(min(min((p.attained_tflops for p in points), default=1.0) / 3, top / 1e3), top * 2)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of the fewest bytes)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title or f"roofline: {peaks.name} ({peaks.source})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", fontsize=7, ncol=2 if len(labels) > 8 else 1)
    written = save(fig, path, suffixes)
    plt.close(fig)
    return written


def sweep_axis(records: list[Record]) -> str:
    """The numeric case axis that varies most across the records (the sweep's x axis)."""
    best, best_count = None, 1
    for name in records[0].case:
        values = {r.case.get(name) for r in records}
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values) and len(values) > best_count:
            best, best_count = name, len(values)
    if best is None:
        raise UserError("these records do not sweep a numeric case axis (run with e.g. --n 256,1024,4096)")
    return best


def throughput_plot(records: list[Record], path: Path, metric: str = "tflops") -> list[Path]:
    """One line per implementation (and per value of any other varying axis): `metric` (a field of
    the records' metrics) against the swept axis. The suite's baseline (the peer) is dashed."""
    plt = pyplot()
    ok = [r for r in records if r.ok and r.metrics and getattr(r.metrics, metric) is not None]
    if not ok:
        raise UserError("no OK records with a measured throughput to plot")
    axis = sweep_axis(ok)
    others = [name for name in ok[0].case if name != axis
              and len({str(r.case.get(name)) for r in ok}) > 1]
    lines: dict[str, list[tuple[float, float]]] = {}
    peers = set()
    for r in ok:
        name = r.name
        if others:
            name += " [" + ",".join(f"{k}={r.case[k]}" for k in others) + "]"
        lines.setdefault(name, []).append((r.case[axis], getattr(r.metrics, metric)))
        if r.impl == r.baseline:
            peers.add(name)
    fig, ax = plt.subplots(figsize=(9, 6))
    for name, xy in sorted(lines.items()):
        xy.sort()
        ax.plot([a for a, _ in xy], [b for _, b in xy], marker="o", ls="--" if name in peers else "-",
                label=f"{name} (peer)" if name in peers else name)
    xs = [a for xy in lines.values() for a, _ in xy]
    if max(xs) / max(min(xs), 1e-12) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(axis)
    ax.set_ylabel({"tflops": "TFLOP/s", "gbps": "GB/s (fewest bytes)"}.get(metric, metric))
    suite = ok[0].suite
    ax.set_title(f"{suite}: {metric} against {axis}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    written = save(fig, path)
    plt.close(fig)
    return written


def _time_unit(medians: list[float]) -> tuple[float, str]:
    """A scale and unit for times in ms, so the axis reads 830 us rather than 0.83 ms."""
    top = max(medians, default=1.0)
    return (1e3, "us") if top < 1 else (1e-3, "s") if top >= 1e3 else (1.0, "ms")


def _band(record: Record, scale: float) -> tuple[float, float, float]:
    """An OK record's median and how far its p20 and p80 lie below and above it, times ``scale``."""
    stats = record.timing.stats
    low = stats.p20 if stats.p20 is not None else stats.median
    high = stats.p80 if stats.p80 is not None else stats.median
    return stats.median * scale, (stats.median - low) * scale, (high - stats.median) * scale


def history_plot(history, path: Path, suffixes: tuple[str, ...] = (".svg",)) -> list[Path]:
    """A case's history (kbench.history.CaseHistory): each implementation's median time over the runs
    with its p20-p80 spread as error bars, the case's baseline (the peer) dashed, a slower step ringed
    in red with its change, a run that did not time an implementation marked with its status at the
    foot. A case of one run is a bar per implementation instead."""
    plt = pyplot()
    runs = history.runs
    baseline = next((r.baseline for run in runs for r in run.records if r.baseline), None)
    scale, unit = _time_unit([r.median for run in runs for r in run.records if r.ok])
    labels = list(dict.fromkeys(r.name for run in runs for r in run.records))
    colours = plt.get_cmap("tab10")
    if len(runs) == 1:
        fig = _bars(plt, runs[0], baseline, scale, unit, colours, labels)
    else:
        fig, ax = plt.subplots(figsize=(9, 4.2))
        for i, label in enumerate(labels):
            mine = [(x, r) for x, run in enumerate(runs) for r in run.records if r.name == label]
            timed = [(x, r) for x, r in mine if r.ok]
            peer = label == baseline
            colour = colours(i % 10)
            if timed:
                ys, below, above = zip(*(_band(r, scale) for _, r in timed))
                ax.errorbar([x for x, _ in timed], ys, yerr=[below, above], marker="o", ms=4, capsize=3, lw=1.5,
                            color=colour, ls="--" if peer else "-", label=f"{label} (peer)" if peer else label)
            for x, r in mine:
                if not r.ok:  # no time to draw: its status at the foot of the run
                    ax.annotate(r.status, (x, 0.02), xycoords=ax.get_xaxis_transform(), ha="center",
                                fontsize=7, color=colour)
        slower = [s for s in history.regressions if s.pair.current.record.ok]
        for n, step in enumerate(slower):
            y = step.pair.current.record.median * scale
            ax.scatter([step.run], [y], s=160, facecolors="none", edgecolors="red", linewidths=1.8, zorder=4,
                       label="slower than the run before" if n == 0 else None)
            ax.annotate(f"{step.pair.ratio - 1:+.0%}", (step.run, y), textcoords="offset points", xytext=(7, 6),
                        color="red", fontsize=8, fontweight="bold")
        every = max(1, len(runs) // 12)  # at most a dozen tick labels
        ax.set_xticks(range(0, len(runs), every))
        ax.set_xticklabels([runs[x].label.replace(" ", "\n", 1) for x in range(0, len(runs), every)], fontsize=7)
        ax.set_xlim(-0.5, len(runs) - 0.5)
        ys = [r.median * scale for run in runs for r in run.records if r.ok]
        if ys and max(ys) / min(ys) > 30:
            ax.set_yscale("log")
        ax.set_ylabel(f"median time ({unit}), p20-p80")
        ax.set_xlabel("run (commit, date UTC)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.axes[0].set_title(f"{history.suite}: {history.case_key}", fontsize=9)
    written = save(fig, path, suffixes)
    plt.close(fig)
    return written


def _bars(plt, run, baseline: str | None, scale: float, unit: str, colours, labels: list[str]):
    """One run: a bar per implementation (median, p20-p80 error bar), the peer hatched; a record
    without a time gets its status instead of a bar."""
    from kbench.report import format_time

    records = run.records
    fig, ax = plt.subplots(figsize=(9, 0.8 + 0.38 * len(records)))
    for y, r in enumerate(records):
        peer = r.name == baseline
        if r.ok:
            median, below, above = _band(r, scale)
            ax.barh(y, median, color=colours(labels.index(r.name) % 10), hatch="//" if peer else None, alpha=0.85,
                    xerr=[[below], [above]], capsize=3)
            ax.annotate(format_time(r.median), (median + above, y), va="center", fontsize=7,
                        textcoords="offset points", xytext=(6, 0))
        else:
            ax.annotate(f" {r.status}", (0, y), va="center", fontsize=7, color="firebrick")
    ax.set_yticks(range(len(records)))
    ax.set_yticklabels([f"{r.name} (peer)" if r.name == baseline else r.name for r in records], fontsize=8)
    ax.invert_yaxis()  # the table's order, top down
    ax.set_xlabel(f"median time ({unit}), p20-p80 (one run: {run.label})")
    ax.margins(x=0.15)
    ax.grid(True, axis="x", alpha=0.3)
    return fig
