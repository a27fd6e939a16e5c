"""`kbench profile`: kbench's own worker under Nsight Compute, Nsight Systems or torch.profiler.

- :mod:`kbench.profilers.capture`: one run: the options checked, each implementation profiled and
  its outcome read back, the summary and the exit code (the CLI only parses and prints).
- :mod:`kbench.profilers.agreement`: a profile's time per call against a `kbench run`'s event medians.
- :mod:`kbench.profilers.common`: output paths under ``results/profiles/``, the profiled child
  process (timeout, kill), the failures every profiler shares and their exit codes.
- :mod:`kbench.profilers.ncu`: the ``ncu`` command line and the parser of its raw-page CSV.
- :mod:`kbench.profilers.nsys`: the ``nsys profile`` / ``nsys stats`` command lines and the
  parser of the stats CSVs.
- :mod:`kbench.profilers.torch_profiler`: the capture (run inside the worker) and its kernel table.

Nothing here imports torch at import time: ``kbench --help`` stays fast.
"""
