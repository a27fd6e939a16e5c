"""What the GPU tests need, as fixtures that skip a test when it is missing: a CUDA device, CuPy (the
RawKernel suites), two GPUs (all-reduce, p2p), compute-sanitizer; and the environment of kbench's
workers, which compile Triton kernels instead of interpreting them.

Every test module here is marked ``gpu`` (``python -m pytest -m gpu`` selects them) and lists the
fixtures it needs in ``pytest.mark.usefixtures``, so on a machine without them it is skipped, with
the reason, before anything heavier (the registry, a kbench run) is set up.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest


def _cuda_devices() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.fixture
def needs_cuda():
    if _cuda_devices() < 1:
        pytest.skip("needs a CUDA device")


@pytest.fixture
def needs_cupy(needs_cuda):
    if importlib.util.find_spec("cupy") is None:
        pytest.skip("needs CuPy (pip install -e '.[gpu]'): the RawKernel implementations run through it")


@pytest.fixture
def needs_hopper(needs_cuda):
    """sm_90 exactly: wgmma and setmaxnreg (cuda-fa3, gluon-fa3) exist on no other GPU."""
    import torch

    if tuple(torch.cuda.get_device_capability()) != (9, 0):
        pytest.skip("runs on sm_90 (Hopper) only")


@pytest.fixture
def needs_two_gpus(needs_cuda):
    found = _cuda_devices()
    if found < 2:
        pytest.skip(f"needs 2 CUDA devices, found {found}")


def find_compute_sanitizer() -> str | None:
    """compute-sanitizer on PATH, or in the CUDA toolkit's bin folder ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda)."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    roots = [os.environ.get(var) for var in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    for root in filter(None, roots):
        candidate = Path(root) / "bin" / "compute-sanitizer"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


@pytest.fixture
def compute_sanitizer(needs_cupy) -> str:
    """The path of compute-sanitizer (the sanitized runs are of CuPy kernels)."""
    found = find_compute_sanitizer()
    if found is None:
        pytest.skip("needs compute-sanitizer (the CUDA toolkit's): not on PATH, in $CUDA_HOME/bin, $CUDA_PATH/bin "
                    "or /usr/local/cuda/bin")
    return found


@pytest.fixture
def compiled_triton(registry, monkeypatch):
    """tests/conftest.py sets TRITON_INTERPRET for the CPU tests; kbench's workers (and the sanitized runs)
    must compile Triton kernels, so it is unset for them. The built-in registry is loaded first, still
    interpreted: the Triton helpers this process caches (kbench.loader.load_helper) are then the ones
    the CPU tests expect, whichever of the two runs first."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
