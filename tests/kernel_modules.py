"""A built-in kernel file as a module of its own, for tests of its plain-Python parts (launch plans,
layouts, explain figures): executed into a throwaway registry, so that its @implementation does not
register twice beside the one kbench's loader made."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from kbench.registry import Registry, collecting


def load_kernel_module(path: Path):
    spec = importlib.util.spec_from_file_location(f"{path.parent.name}_{path.stem}_under_test", path)
    module = importlib.util.module_from_spec(spec)
    with collecting(Registry(), str(path)):
        spec.loader.exec_module(module)
    return module
