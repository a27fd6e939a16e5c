"""NVTX ranges around the timed calls, so a profiler sees exactly the kernels kbench measures.

Every timed call runs inside a push/pop range named ``kbench/<suite>/<label>/<case key>``
(:func:`range_name`). The ranges come from the ``nvtx`` package when it is installed,
else from ``torch.cuda.nvtx`` (a CUDA build of torch), else they are no-ops (a CPU
build: nothing could record them). Both push into NVTX's default domain, which is
what ``ncu --nvtx-include`` and ``nsys --nvtx-capture`` look in when no domain is named.

With ``record_function=True`` the same range is also a ``torch.profiler.record_function``
scope, which is how ``kbench profile --torch-profiler`` finds the timed calls in its trace.

Warm-up, correctness checks, input cloning, the L2 flush and the post-timing checks
happen outside the ranges (see :mod:`kbench.timing`).
"""

from __future__ import annotations

PREFIX = "kbench"

_backend = None  # (push, pop, name) once looked up; (None, None, None) when there is none
_looked_up = False


def range_name(suite: str, label: str, case_key: str) -> str:
    """``kbench/<suite>/<label>/<case key>``: the name of every timed call's range."""
    return f"{PREFIX}/{suite}/{label}/{case_key}"


def _lookup():
    try:
        import nvtx  # the `nvtx` package (pip install nvtx)

        if getattr(nvtx, "enabled", lambda: True)():
            return nvtx.push_range, nvtx.pop_range, "nvtx"
    except ImportError:
        pass
    try:
        import torch

        if hasattr(torch._C, "_nvtx"):  # only CUDA builds of torch link NVTX
            from torch.cuda import nvtx as torch_nvtx

            return torch_nvtx.range_push, torch_nvtx.range_pop, "torch.cuda.nvtx"
    except (ImportError, AttributeError):
        pass
    return None, None, None


def backend() -> tuple:
    """(push(name), pop(), backend name) of the NVTX binding in use; three Nones without one."""
    global _backend, _looked_up
    if not _looked_up:
        _backend = _lookup()
        _looked_up = True
    return _backend


def backend_name() -> str | None:
    return backend()[2]


def reset() -> None:
    """Look the binding up again on next use (tests swap in a fake ``nvtx`` module)."""
    global _backend, _looked_up
    _backend, _looked_up = None, False


class Ranges:
    """push()/pop() of one named range around each timed call; does nothing when ``name`` is None."""

    def __init__(self, name: str | None, record_function: bool = False):
        self.name = name
        self._push = self._pop = None
        if name is not None:
            self._push, self._pop, _ = backend()
        self._record_function = None
        if name is not None and record_function:
            from torch.profiler import record_function as rf

            self._record_function = rf
        self._open = None

    @property
    def active(self) -> bool:
        return self._push is not None or self._record_function is not None

    def push(self) -> None:
        if self._push is not None:
            self._push(self.name)
        if self._record_function is not None:
            self._open = self._record_function(self.name)
            self._open.__enter__()

    def pop(self) -> None:
        if self._open is not None:
            self._open.__exit__(None, None, None)
            self._open = None
        if self._pop is not None:
            self._pop()
