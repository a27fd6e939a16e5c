"""Pictures of results: the roofline, and throughput against size for a sweep.

Each figure is written twice, as PNG and SVG, next to the path asked for.
matplotlib is imported here only (an optional dependency: `pip install kbench[plot]`).
"""

from __future__ import annotations

from pathlib import Path

from kbench.errors import UserError
from kbench.record import Record


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise UserError("plots need matplotlib: pip install 'kbench[plot]' (or matplotlib)") from None
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> list[Path]:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for suffix in (".png", ".svg"):
        target = path.with_suffix(suffix)
        try:
            fig.savefig(target, dpi=150, bbox_inches="tight")
        except OSError as exc:
            raise UserError(f"cannot write {str(target)!r}: {exc.strerror or exc}") from None
        written.append(target)
    return written


ANNOTATE_AT_MOST = 12  # beyond this many points, labels overlap: colours and a legend instead


def roofline_plot(points, peaks, path: Path, title: str = "", calibration: dict | None = None) -> list[Path]:
    """Log-log roofline: the memory roof, each compute ceiling present, one point per result,
    coloured by implementation. Points above their roof are red crosses marked invalid."""
    import numpy as np

    plt = _pyplot()
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
    written = _save(fig, path)
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
    plt = _pyplot()
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
    written = _save(fig, path)
    plt.close(fig)
    return written


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
    plt = _pyplot()
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
    written = _save(fig, path)
    plt.close(fig)
    return written


def bandwidth_plot(records: list[Record], path: Path, metric: str = "busbw") -> list[Path]:
    """busbw (or algbw) against the message size, one colour per implementation (and per number of ranks
    when that varies): solid the op alone (nccl-tests' method), dotted kbench's median of the closure."""
    from kbench.suite import format_size

    key = f"{metric}_gbps"
    ok = [r for r in records if r.ok and r.figures.get(key) is not None]
    if not ok:
        raise UserError(f"no OK records with a measured {metric} to plot (an allreduce run's results file)")
    plt = _pyplot()
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
    written = _save(fig, path)
    plt.close(fig)
    return written
