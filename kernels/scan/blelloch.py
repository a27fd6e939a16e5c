"""Single-pass Blelloch scan with decoupled look-back, a CuPy RawKernel (``blelloch.cu`` beside this file).

One block per tile of 256 threads x ITEMS elements (32 for 4-byte types, 16 for
int64: 128 bytes a thread; ``--param items=`` picks 4 to 32), loaded and stored through
shared memory (``--param staged=0``: each thread its own 16-byte loads). The tile counter
and the tiles' flags are zeroed by the closure before each launch; the buffers for them
are allocated once, here.
"""

from pathlib import Path

from kbench.dtypes import ELEMENT_BYTES
from kbench.loader import load_helper
from kbench.registry import Unsupported, implementation

SOURCE = Path(__file__).with_suffix(".cu")
THREADS = 256
# Elements per thread by default: 128 bytes a thread. The H200 sweep (docs/performance.md, staged):
# int32 16 -> 0.74x torch.cumsum, 32 -> 0.92x; int64 8 -> 0.61x, 16 -> 0.79x.
CUDA_TYPES = {"int32": ("int", 32), "fp32": ("float", 32), "int64": ("long long", 16)}

_cupy = load_helper(Path(__file__).parent.parent / "_cupy_common.py")

ITEM_CHOICES = (4, 8, 16, 32)  # elements per thread --param items= may ask for (whole 16-byte vectors)


def plan(n: int, dtype: str, exclusive: bool, aligned: bool, staged: bool = False, items: int = 0,
         early: bool = False) -> dict:
    """Kernel name, tiles (one block each) and the status words the look-back needs.
    ``items`` elements per thread; 0: the default (128 bytes a thread). ``early``: look back right
    after the up-sweep, before the down-sweep (blelloch.cu)."""
    if dtype not in CUDA_TYPES:
        raise Unsupported(f"{dtype}: blelloch scans int32, int64 or fp32")
    t, default_items = CUDA_TYPES[dtype]
    items = items or default_items
    allowed = [i for i in ITEM_CHOICES if i * ELEMENT_BYTES[dtype] % 16 == 0]
    if items not in allowed:
        raise Unsupported(f"items={items}: use 0 (the default, {default_items}) or one of "
                          f"{', '.join(map(str, allowed))}")
    tile = THREADS * items
    tiles = -(-n // tile)
    staged = staged and aligned  # the staged copies are 16-byte ones
    flags = ", ".join(str(b).lower() for b in (exclusive, aligned, staged, early))
    return {"name": f"scan_blelloch<{t}, {items}, {flags}>", "grid": (tiles,), "block": (THREADS,),
            "tile": tile, "status_words": 1 + tiles, "staged": staged, "early": early}


def _early(lookback: str) -> bool:
    if lookback not in ("late", "early"):
        raise Unsupported(f"lookback={lookback!r}: use late (after the down-sweep) or early (before it)")
    return lookback == "early"


def explain(case, params) -> dict:
    """`kbench explain scan --impl blelloch`: the tiles, the sweeps and the look-back for this case."""
    try:
        p = plan(case.n, case.dtype, case.exclusive, aligned=True, staged=bool(int(params["staged"])),
                 items=int(params["items"]), early=_early(params.get("lookback", "late")))
    except Unsupported as exc:
        return {"configuration": f"not runnable: {exc}"}
    blocks, threads = _cupy.launch_size(p)
    items = p["tile"] // THREADS
    e = ELEMENT_BYTES[case.dtype]
    levels = THREADS.bit_length() - 1  # of each sweep over the THREADS thread totals
    wide = [d for d in (1 << i for i in range(levels)) if THREADS // (2 * d) > 32]
    return {
        "kernel": p["name"],
        "grid": f"{blocks:,} tiles of {p['tile']:,} elements ({p['tile'] * e:,} bytes), one block of {threads} "
                f"threads each, in the order of a global tile counter",
        "per thread": f"{items} consecutive elements scanned serially in registers"
                      + ("; loaded and stored through shared memory with coalesced 16-byte accesses"
                         if p["staged"] else "; its own 16-byte loads and stores"),
        f"Blelloch sweeps of the {THREADS} thread totals": f"{2 * levels} levels; the {2 * len(wide)} with more than "
                                                          f"32 threads adding behind block barriers, the rest in warp 0 "
                                                          f"(__syncwarp)",
        "decoupled look-back": f"warp 0, {'before' if p['early'] else 'after'} the down-sweep, "
                               f"reads up to 32 predecessors' flags at a time; {p['status_words']:,} status "
                               f"words (a tile counter and one flag a tile) zeroed before each launch",
        "global traffic": f"{case.n * e:,} bytes read + {case.n * e:,} written, plus a flag, an aggregate and a "
                          f"prefix a tile",
        **_cupy.resource_figures(SOURCE, p["name"], blocks, threads),
    }


@implementation(
    "scan", "blelloch", backend="cupy", cuda=True, modules=("torch", "cupy"), unit="memory",
    dtypes=tuple(CUDA_TYPES), params={"staged": 1, "items": 0, "lookback": "late"}, explain=explain,
    description="one pass: Blelloch up/down-sweep per tile in shared memory, decoupled look-back across tiles",
)
def blelloch(case, inputs, out, staged=1, items=0, lookback="late"):
    """``--param staged=0``: each thread loads its own elements (1, the default: full tiles loaded and
    stored coalesced through shared memory, blelloch.cu); ``--param items=16``: elements per thread
    (0: 32 for 4-byte types, 16 for int64); ``--param lookback=early``: publish the tile's aggregate and
    look back before the down-sweep (not yet measured on a GPU)."""
    import numpy as np
    import torch

    x = inputs["x"]
    aligned = x.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0
    p = plan(case.n, case.dtype, case.exclusive, aligned, bool(int(staged)), int(items), _early(lookback))
    kernel = _cupy.compiled(str(SOURCE), p["name"])
    status = torch.empty(p["status_words"], dtype=torch.int32, device=x.device)
    aggregates = torch.empty(max(1, p["grid"][0]), dtype=x.dtype, device=x.device)
    prefixes = torch.empty_like(aggregates)
    args = (np.uint64(x.data_ptr()), np.uint64(out.data_ptr()), np.int64(case.n), np.uint64(status.data_ptr()),
            np.uint64(aggregates.data_ptr()), np.uint64(prefixes.data_ptr()))

    def body():
        status.zero_()  # tile counter and every tile's flag
        if case.n:
            kernel(p["grid"], p["block"], args)

    run = _cupy.on_torch_stream(body)
    run.config = {"tile_elements": p["tile"], "tiles": p["grid"][0], "vector_loads": aligned,
                  "staged": p["staged"],
                  **_cupy.kernel_config(kernel, p["grid"], p["block"])}
    return run
