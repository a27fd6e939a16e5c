"""What the FlashInfer peers (package ``flashinfer-python``) have in common: what they need, and the
last step of their set-up. A private file: the loader does not register it; kernel files load it with
``load_helper(Path(__file__).parent.parent / "_flashinfer.py")``.

FlashInfer is optional. Registered with :data:`NEEDS`, a peer is a SKIP that names the package where
it cannot be imported (kbench.registry.skip_reason looks the module up without importing it), so no
kernel file imports it at load time. Packages installed with ``pip install --target DIR`` are found
through ``$KBENCH_SITE_DIRS`` (kbench.loader).
"""

# The @implementation arguments every FlashInfer peer takes: a CUDA device, the package, and sm_80 or
# newer (its bf16 kernels need Ampere's bf16 tensor cores).
NEEDS = {"backend": "flashinfer", "cuda": True, "modules": ("torch", "flashinfer"), "min_cc": (8, 0)}


def compiled(run, device_tensor, **config):
    """``run`` once called, and stamped with what it ran (``run.config``: the package's version and
    ``config``). FlashInfer compiles each kernel variant with nvcc the first time it is used (minutes,
    once per cache folder, ``~/.cache/flashinfer``): that call belongs to set-up, never to the timed
    ones, and the device is synchronised so that no compile or first launch runs into the timing."""
    import flashinfer
    import torch

    run()
    if device_tensor.is_cuda:
        torch.cuda.synchronize()
    # The module's own version: a source tree or a trimmed install may carry no package metadata.
    run.config = {"flashinfer": flashinfer.__version__, **config}
    return run
