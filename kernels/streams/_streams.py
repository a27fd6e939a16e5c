"""What the streams implementations share: the relax kernel on a chosen stream, the serial schedule,
the chunked pipeline, and the measurements the pipelined implementation reports after timing.

A private helper (the loader skips `_` files); kernel files and tests/gpu/test_streams_gpu.py load it
with ``kbench.loader.load_helper``. torch and CuPy are imported inside the functions.

How the figures are measured (:meth:`Pipeline.figures`, called by the worker once, after kbench has
timed the closure and before it checks the closure again on new inputs):

- each stage alone, chunked exactly as the pipeline chunks it, all chunks back to back on one
  stream: H2D (pinned host -> device), the kernel, D2H (device -> pinned host); and H2D with D2H at
  once (all chunks in on one stream while all chunks go out on another);
- the serial schedule (the whole buffer in, the kernel, the whole buffer out, on one stream: what
  the ``serial`` implementation's closure does), on device buffers of the whole size allocated for it;
- each of these is timed with CUDA events on the current stream (side streams joined back before
  the end event), after one warm-up run, and the median of REPS runs is kept;
- the pipelined total is kbench's own median of the timed closure (the harness's samples);
- the timeline: one more pipelined run with an event before and after each stage of each chunk,
  recorded on the chunk's stream, read relative to an event recorded before the run.

ideal = the slowest stage's total plus one chunk of each other stage (the suite's pipeline.ideal_ms, with
the both-ways copy time as a candidate bottleneck); overlap efficiency = ideal / pipelined; speedup
= serial / pipelined.
"""

from __future__ import annotations

import datetime as dt
import statistics
from pathlib import Path

from kbench.loader import BUILTIN_SUITES, load_helper
from kbench.registry import Unsupported
from kbench.suite import format_size

SOURCE = Path(__file__).with_name("relax.cu")
UNROLL = 8
THREADS = 256
KERNEL = f"streams_relax<{UNROLL}>"
MAX_BLOCKS = 2**31 - 1
REPS = 5  # event-timed runs per figure (the median is kept)

pipeline = load_helper(BUILTIN_SUITES / "streams" / "pipeline.py")
_cupy = load_helper(Path(__file__).parent.parent / "_cupy_common.py")


def host_buffers(inputs: dict, out):
    """The input and output: 1-D contiguous fp32 of the same size in pinned host memory (async
    copies from pageable memory are not asynchronous: refused)."""
    import torch

    x = inputs["x"]
    for name, t in (("x", x), ("out", out)):
        if t.device.type != "cpu" or t.dtype != torch.float32 or t.dim() != 1 or not t.is_contiguous():
            raise Unsupported(f"{name} must be a contiguous 1-D fp32 host tensor (got {t.dtype} {tuple(t.shape)} "
                              f"on {t.device})")
        if not t.is_pinned():
            raise Unsupported(f"{name} is in pageable host memory: async copies need pinned memory")
    if out.numel() != x.numel():
        raise Unsupported(f"out has {out.numel()} elements, x {x.numel()}")
    return x, out


def device_buffer(count: int):
    import torch

    return torch.empty(count, dtype=torch.float32, device="cuda")


def launch_blocks(count: int) -> int:
    """Blocks of THREADS threads for ``count`` elements (the kernel loops grid-stride past MAX_BLOCKS)."""
    return min(_cupy.ceil_div(count, THREADS), MAX_BLOCKS)


class Relax:
    """The compiled kernel with its constants; :meth:`launch` queues it on a torch stream."""

    def __init__(self, work: int):
        self.kernel = _cupy.compiled(str(SOURCE), KERNEL)
        self.work = work
        self.a, self.b = pipeline.relax_constants(work)
        self._wrappers: dict[int, object] = {}  # torch stream handle -> CuPy's wrapper of it

    def launch(self, stream, src, dst, count: int, work: int | None = None) -> None:
        """dst[:count] = relax(src[:count]) with ``work`` steps (default: the case's), on ``stream``."""
        import numpy as np

        handle = stream.cuda_stream
        wrapper = self._wrappers.get(handle)
        if wrapper is None:
            wrapper = self._wrappers[handle] = _cupy.cupy_view(stream)
        blocks = launch_blocks(count)
        args = (np.uint64(src.data_ptr()), np.uint64(dst.data_ptr()), np.int64(count),
                np.int32(self.work if work is None else work), np.float32(self.a), np.float32(self.b))
        with wrapper:
            self.kernel((blocks,), (THREADS,), args)

    def config(self, count: int) -> dict:
        grid = (launch_blocks(count),)
        return {"kernel": KERNEL, "work": self.work, "a": self.a, "b": self.b,
                **_cupy.kernel_config(self.kernel, grid, (THREADS,))}


def serial_schedule(stream, x, d_in, d_out, y, relax: Relax) -> None:
    """Everything on ``stream``, one step after the other: the whole buffer in, the kernel, the whole buffer out."""
    import torch

    with torch.cuda.stream(stream):
        d_in.copy_(x, non_blocking=True)
        relax.launch(stream, d_in, d_out, x.numel())
        y.copy_(d_out, non_blocking=True)


def event_ms(fn, reps: int = REPS) -> float:
    """Median milliseconds of ``fn()`` between two events on the current stream (one warm-up run first).
    ``fn`` must join any side stream back to the current stream before it returns."""
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times)


class Pipeline:
    """The case's buffer in chunks over streams (chunk i on stream i % streams), each stream with
    device buffers of the longest chunk, reused chunk after chunk (stream order keeps chunk i + S
    from overwriting them before chunk i's copy-out has read them)."""

    def __init__(self, case, x, y):
        import torch

        self.case, self.x, self.y = case, x, y
        self.n = x.numel()
        self.ranges = pipeline.chunk_ranges(self.n, case.chunks)
        self.streams_used = min(case.streams, case.chunks)
        self.relax = Relax(case.work)
        self.longest = max(stop - start for start, stop in self.ranges)
        self.streams = [torch.cuda.Stream() for _ in range(self.streams_used)]
        d_in = [device_buffer(self.longest) for _ in self.streams]
        d_out = [device_buffer(self.longest) for _ in self.streams]
        # Per chunk: (its stream, host input view, device input view, device output view, host output view).
        self.plan = []
        for i, (start, stop) in enumerate(self.ranges):
            j, count = i % self.streams_used, stop - start
            self.plan.append((self.streams[j], x[start:stop], d_in[j][:count], d_out[j][:count], y[start:stop]))

    # --- the timed closure ------------------------------------------------------------------
    def run(self, marks=None) -> None:
        """Queue every chunk: copy in, kernel, copy out on its stream. The streams first wait for
        the current stream (kbench's start event) and the current stream then waits for all of
        them (its end event covers the work). ``marks``: four events per chunk, recorded before the
        copy in and after each stage (the timeline)."""
        import torch

        current = torch.cuda.current_stream()
        for stream in self.streams:
            stream.wait_stream(current)
        for i, (stream, x, d_in, d_out, y) in enumerate(self.plan):
            with torch.cuda.stream(stream):
                if marks:
                    marks[i][0].record(stream)
                d_in.copy_(x, non_blocking=True)
                if marks:
                    marks[i][1].record(stream)
                self.relax.launch(stream, d_in, d_out, d_in.numel())
                if marks:
                    marks[i][2].record(stream)
                y.copy_(d_out, non_blocking=True)
                if marks:
                    marks[i][3].record(stream)
        for stream in self.streams:
            current.wait_stream(stream)

    def config(self) -> dict:
        sizes = [stop - start for start, stop in self.ranges]
        return {"chunks": len(self.ranges), "streams": self.streams_used, "chunk_bytes": [4 * min(sizes), 4 * max(sizes)],
                "device_buffer_bytes": 2 * 4 * self.longest * self.streams_used, "host_memory": "pinned",
                **self.relax.config(self.longest)}

    # --- each stage alone -------------------------------------------------------------------
    def h2d_all(self) -> None:
        for _, x, d_in, _, _ in self.plan:
            d_in.copy_(x, non_blocking=True)

    def kernel_all(self) -> None:
        import torch

        current = torch.cuda.current_stream()
        for _, _, d_in, d_out, _ in self.plan:
            self.relax.launch(current, d_in, d_out, d_in.numel())

    def d2h_all(self) -> None:
        for _, _, _, d_out, y in self.plan:
            y.copy_(d_out, non_blocking=True)

    def both_ways(self, side) -> None:
        """All chunks in on side[0] while all chunks go out on side[1], joined back to the current stream."""
        import torch

        current = torch.cuda.current_stream()
        for stream, body in zip(side, (self.h2d_all, self.d2h_all)):
            stream.wait_stream(current)
            with torch.cuda.stream(stream):
                body()
        for stream in side:
            current.wait_stream(stream)

    def serial_ms(self) -> float | None:
        """The serial schedule on the same host buffers, with device buffers of the whole size (freed on
        return); None when those do not fit in device memory (the chunked pipeline needs far less)."""
        import torch

        try:
            d_in, d_out = device_buffer(self.n), device_buffer(self.n)
        except torch.cuda.OutOfMemoryError:
            return None
        return event_ms(lambda: serial_schedule(torch.cuda.current_stream(), self.x, d_in, d_out, self.y, self.relax))

    def timeline(self) -> tuple[list, float]:
        """One pipelined run with events around each stage of each chunk: the four times of each
        chunk in ms from an event recorded on the current stream before the run, and the run's total."""
        import torch

        marks = [[torch.cuda.Event(enable_timing=True) for _ in range(4)] for _ in self.plan]
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        self.run(marks)
        end.record()
        end.synchronize()
        times = [[round(begin.elapsed_time(event), 4) for event in chunk] for chunk in marks]
        return times, begin.elapsed_time(end)

    # --- what the record carries ------------------------------------------------------------
    def figures(self, timing: dict) -> dict:
        import torch

        case, nbytes = self.case, 4 * self.n
        h2d = event_ms(self.h2d_all)
        kernel = event_ms(self.kernel_all)
        d2h = event_ms(self.d2h_all)
        side = [torch.cuda.Stream(), torch.cuda.Stream()]
        both = event_ms(lambda: self.both_ways(side))
        serial = self.serial_ms()
        marks, total = self.timeline()
        pipelined = timing["stats"]["median"]
        ideal = pipeline.ideal_ms(h2d, kernel, d2h, len(self.ranges), both)
        fig = {
            "method": f"CUDA events, median of {REPS} runs after a warm-up; stages chunked as the pipeline; "
                      "pipelined_ms is kbench's median of the timed closure",
            "chunks": len(self.ranges), "streams": self.streams_used, "work": case.work,
            "h2d_ms": h2d, "h2d_gbps": nbytes / h2d / 1e6,
            "kernel_ms": kernel, "kernel_tflops": 2.0 * case.work * self.n / kernel / 1e9,
            "d2h_ms": d2h, "d2h_gbps": nbytes / d2h / 1e6,
            "both_ms": both, "both_gbps": 2 * nbytes / both / 1e6,
            "serial_ms": serial, "pipelined_ms": pipelined, "ideal_ms": ideal,
            "overlap_efficiency": pipeline.overlap_efficiency(ideal, pipelined),
            "speedup_vs_serial": pipeline.speedup(serial, pipelined) if serial else None,
            "balanced_work": pipeline.balanced_work(case.work, kernel, max(h2d, d2h)),
            "timeline": {"unit": "ms", "lanes": [f"stream {j}" for j in range(self.streams_used)],
                         "chunk_events": marks, "total_ms": total,
                         "bars": pipeline.timeline_bars(marks, self.streams_used)},
        }
        fig.update(self.draw(fig))
        fig["summary"] = pipeline.summary_lines(fig)
        return fig

    def draw(self, fig: dict) -> dict:
        """The timeline picture under results/timelines/ (its path), or why there is none."""
        plots = load_helper(BUILTIN_SUITES / "streams" / "timeline.py")
        from kbench.errors import UserError

        case = self.case
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        size = format_size(case.bytes)
        name = f"streams-pipelined-{size}-{fig['chunks']}chunks-{fig['streams']}streams-work{case.work}-{stamp}"
        line = fig["timeline"]
        size += " bytes" if size.isdigit() else ""
        title = (f"streams, pipelined: {size} in {fig['chunks']} chunks over {fig['streams']} "
                 f"streams, work {case.work}: this run {line['total_ms']:.3f} ms, ideal {fig['ideal_ms']:.3f} ms")
        try:
            path = plots.timeline_path(name)
            plots.timeline_plot(line["lanes"], line["bars"], path, title,
                                lines={f"ideal {fig['ideal_ms']:.3f} ms": fig["ideal_ms"],
                                       f"this run {line['total_ms']:.3f} ms": line["total_ms"]})
        except UserError as exc:  # matplotlib missing, or the folder not writable: the figures stand without it
            return {"timeline_png": None, "timeline_note": str(exc)}
        return {"timeline_png": str(path)}
