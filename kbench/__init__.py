"""kbench: benchmark, check and profile interchangeable GPU kernel implementations.

The engine (this package) holds no kernel. Problem definitions live in
``suites/`` and implementations in ``kernels/<suite>/``; both are loaded by
path (see :mod:`kbench.loader`), so adding a kernel means adding a file.

From Python: ``kbench.run(suite, **options)``, ``kbench.load(*paths)`` and
``ResultSet.to_pandas()`` (:mod:`kbench.api`).
"""

__version__ = "0.1.0"

__all__ = ["ResultSet", "load", "run"]


def __getattr__(name: str):
    """kbench.run, kbench.load and kbench.ResultSet (kbench/api.py), imported on first use so that
    `import kbench` (and the command line) stays fast."""
    if name in __all__:
        from kbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'kbench' has no attribute {name!r}")
