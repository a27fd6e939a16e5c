"""kbench: benchmark, check and profile interchangeable GPU kernel implementations.

The engine (this package) holds no kernel. Problem definitions live in
``suites/`` and implementations in ``kernels/<suite>/``; both are loaded by
path (see :mod:`kbench.loader`), so adding a kernel means adding a file.
"""

__version__ = "0.1.0"
