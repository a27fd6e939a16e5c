"""Load suites and kernels by path, so adding a kernel means adding a file.

The built-in ``suites/`` and ``kernels/`` folders sit beside the ``kbench``
package in the source tree. They are executed as modules under private names
(``kbench_loaded.*``) rather than imported as top-level packages, so installing
kbench never shadows an unrelated ``kernels`` or ``suites`` package.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import site
import sys
import threading
import traceback
from contextlib import contextmanager
from pathlib import Path

from kbench.errors import UserError
from kbench.registry import Registry, collecting
from kbench.suite import Suite

PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = PACKAGE_DIR.parent


def _builtin(in_wheel: str, in_tree: str) -> Path:
    """A wheel carries the built-in folders inside the package (pyproject's package-dir); the
    source tree (and an editable install) has them beside it. The wheel's copy is looked for
    first: beside an installed kbench, site-packages may hold an unrelated `kernels`."""
    packaged = PACKAGE_DIR / in_wheel
    return packaged if packaged.is_dir() else PROJECT_ROOT / in_tree


BUILTIN_SUITES = _builtin("builtin_suites", "suites")
BUILTIN_KERNELS = _builtin("builtin_kernels", "kernels")

# Extra kernel folders, separated like PATH, added to every run (as --kernels does).
ENV_KERNELS = "KBENCH_KERNELS"
# Extra suite folders, separated like PATH: each holds suite folders (NAME/suite.py) or suite files.
ENV_SUITES = "KBENCH_SUITES"
# Folders of Python packages installed with `pip install --target DIR`, separated like PATH: the
# packages an optional implementation needs (FlashAttention-4, FlashInfer), brought as wheels to a
# machine that has no package index.
ENV_SITE_DIRS = "KBENCH_SITE_DIRS"


def python_files(folder: Path) -> list[Path]:
    """Every .py file under ``folder``, skipping private (_name.py) files and hidden folders."""
    files = []
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder).parts
        if any(p.startswith((".", "_")) for p in rel):
            continue
        files.append(path)
    return files


def suite_files(folder: Path) -> list[Path]:
    """The suite definitions in ``folder``: each subfolder's ``suite.py`` (a suite folder holds its
    definition and everything that is the suite's own beside it: helpers, plots, explain commands,
    loaded by the definition with :func:`load_helper`), and any top-level .py file (a suite in one
    file). Private (_name) and hidden entries are skipped: ``_common/`` holds helpers suites share."""
    files = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith((".", "_")):
            continue
        if path.is_dir() and (path / "suite.py").is_file():
            files.append(path / "suite.py")
        elif path.is_file() and path.suffix == ".py":
            files.append(path)
    return files


def module_name(path: Path) -> str:
    """The name under which a loaded file's module is kept in sys.modules."""
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    stem = path.parent.name if path.name == "suite.py" else path.stem  # a suite folder's definition: its name
    return f"kbench_loaded.{stem}_{digest}"


def load_file(path: Path, registry: Registry) -> None:
    """Execute one file, sending what it registers to ``registry``.

    A file that fails to load is recorded in ``registry.load_errors`` instead of
    stopping the others (a user's broken kernel must not hide the rest).
    """
    name = module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    # Triton reads a kernel's source through its module: keep it findable.
    sys.modules[name] = module
    with collecting(registry, str(path)), _exits_refused():
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - any error in user code is reported, not raised
            sys.modules.pop(name, None)
            if isinstance(exc, SystemExit):
                registry.load_errors[str(path)] = f"it ends the process when imported ({_exit_call(exc)})"
            else:
                registry.load_errors[str(path)] = traceback.format_exception_only(type(exc), exc)[-1].strip()


class _OsExit(SystemExit):
    """os._exit called by a file being loaded (raised instead, on the loading thread)."""


@contextmanager
def _exits_refused():
    """While a kernel or suite file is executed on this thread, os._exit (which no except clause catches)
    raises instead, so a file that ends its process when imported is a load error like sys.exit."""
    real = os._exit
    loading = threading.current_thread()

    def refused(code=0):
        if threading.current_thread() is not loading:
            real(code)  # another thread's exit (a worker's watch of its parent) is not the file's
        raise _OsExit(code)

    os._exit = refused
    try:
        yield
    finally:
        os._exit = real


def _exit_call(exc: SystemExit) -> str:
    return f"os._exit({exc.code})" if isinstance(exc, _OsExit) else f"sys.exit({exc.code!r})"


def load_helper(path: Path):
    """Import a private helper (a `_name.py` beside kernels, which the loader skips) by path, once.

    Kernel files are not a package, so `from ._common import x` cannot work:
    `helpers = load_helper(Path(__file__).parent / "_common.py")` does.
    """
    path = Path(path).resolve()
    name = module_name(path)
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # Triton reads jit functions' source through their module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
    return sys.modules[name]


def add_site_dirs_from_env() -> list[Path]:
    """Put $KBENCH_SITE_DIRS's folders on the import path with site.addsitedir, as site-packages is:
    their .pth files run too. PYTHONPATH would skip those, and some packages need them
    (nvidia-cutlass-dsl's puts the CuTe DSL's `cutlass` package on the path). A folder that does not
    exist is a UserError. Each folder is added once per process (its .pth files run once)."""
    folders = [Path(p) for p in os.environ.get(ENV_SITE_DIRS, "").split(os.pathsep) if p]
    for folder in folders:
        if not folder.is_dir():
            raise UserError(f"{ENV_SITE_DIRS}: {str(folder)!r} is not a folder")
        resolved = str(folder.resolve())
        if resolved not in _site_dirs_added:
            site.addsitedir(resolved)
            _site_dirs_added.add(resolved)
    return folders


_site_dirs_added: set[str] = set()


def kernel_dirs_from_env() -> list[Path]:
    raw = os.environ.get(ENV_KERNELS, "")
    return [Path(p) for p in raw.split(os.pathsep) if p]


def suite_dirs_from_env() -> list[Path]:
    """$KBENCH_SUITES's folders; one that does not exist is a UserError (a typo must not hide a suite)."""
    folders = [Path(p) for p in os.environ.get(ENV_SUITES, "").split(os.pathsep) if p]
    for folder in folders:
        if not folder.is_dir():
            raise UserError(f"{ENV_SUITES}: {str(folder)!r} is not a folder")
    return folders


@functools.cache
def _builtin_suites() -> tuple[dict[str, Suite], dict[str, str]]:
    """The suites (built-in, then $KBENCH_SUITES's) and the errors of suite files that failed, each file
    executed once per process: the command line builds every command's options from them and then
    runs with them."""
    registry = Registry()
    for folder in (BUILTIN_SUITES, *suite_dirs_from_env()):
        for path in suite_files(folder.resolve()):
            load_file(path, registry)
    return registry.suites, registry.load_errors


def builtin_suites() -> dict[str, Suite]:
    """The suites by name (no kernels: cheap, no torch). A copy: the loaded ones stay as they are."""
    return dict(_builtin_suites()[0])


def load(kernel_dirs: list[Path] | tuple = (), with_kernels: bool = True, suite: str | None = None) -> Registry:
    """A fresh registry of the suites and the built-in kernels plus user kernel folders (or single files).

    The suites are the ones loaded once per process (:func:`builtin_suites`); the kernel files are
    executed again for each registry, so every call sees the folders as they are now. With ``suite``,
    of the built-in kernels only that suite's folder (``kernels/SUITE/``) is loaded, where it has one:
    a worker runs one suite's jobs. The user's folders are always loaded whole."""
    suites, suite_errors = _builtin_suites()
    registry = Registry.with_suites(suites, suite_errors)
    if not with_kernels:
        return registry
    add_site_dirs_from_env()  # before any kernel file looks for the packages it needs
    builtin = BUILTIN_KERNELS
    if suite is not None and (BUILTIN_KERNELS / suite).is_dir():
        builtin = BUILTIN_KERNELS / suite
    folders = [builtin, *kernel_dirs_from_env(), *map(Path, kernel_dirs)]
    for folder in folders:
        if folder.is_file() and folder.suffix == ".py":  # one kernel file: loaded even if named _x.py
            load_file(folder.resolve(), registry)
            continue
        if folder.exists() and not folder.is_dir():
            raise UserError(f"kernel path {str(folder)!r} is neither a folder nor a .py file")
        if not folder.is_dir():
            raise UserError(f"kernel folder {str(folder)!r} does not exist")
        for path in python_files(folder.resolve()):
            load_file(path, registry)
    for suite_name, impls in registry.impls.items():
        if suite_name not in registry.suites:
            for impl in impls.values():
                registry.load_errors[impl.source] = (
                    f"implementation {impl.name!r} names unknown suite {suite_name!r}"
                    f" (suites: {', '.join(registry.suites)})")
    return registry
