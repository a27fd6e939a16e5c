"""Single-pass Blelloch scan with decoupled look-back, a CuPy RawKernel (``blelloch.cu`` beside this file).

One block per tile of 256 threads (``--param threads=128``) x ITEMS elements (32 for 4-byte
types, 16 for int64: 128 bytes a thread; ``--param items=`` picks 4 to 32), loaded and stored
through shared memory (``--param staged=0``: each thread its own 16-byte loads). The tiles'
look-back state is one {status, value} word a tile (``--param state=packed``, the default) or a
status array with separate value arrays and fences (``split``). The tile counter and that state are zeroed
by the closure before each launch (one memset); the buffer for them is allocated once, here.
"""

from pathlib import Path

from kbench.dtypes import ELEMENT_BYTES
from kbench.loader import load_helper
from kbench.registry import Unsupported, implementation

SOURCE = Path(__file__).with_suffix(".cu")
THREADS = 256  # the default block; --param threads= picks one of THREAD_CHOICES
THREAD_CHOICES = (128, 256)
COUNTER_BYTES = 16  # the tile counter, padded so the tile state after it stays 16-byte aligned
# Elements per thread by default: 128 bytes a thread. The H200 sweep (docs/performance.md, staged):
# int32 16 -> 0.74x torch.cumsum, 32 -> 0.92x; int64 8 -> 0.61x, 16 -> 0.79x.
CUDA_TYPES = {"int32": ("int", 32), "fp32": ("float", 32), "int64": ("long long", 16)}

_cupy = load_helper(Path(__file__).parent.parent / "_cupy_common.py")

ITEM_CHOICES = (4, 8, 16, 32)  # elements per thread --param items= may ask for (whole 16-byte vectors)


def state_bytes(tiles: int, element_bytes: int, packed: bool) -> int:
    """Bytes of look-back state for `tiles` tiles, laid out as blelloch.cu's TileState reads it (keep the
    two in step)."""
    if packed:
        return tiles * 2 * element_bytes  # {status, value}: 8 bytes for 4-byte types, 16 for 8-byte ones
    return _cupy.ceil_div(tiles * 4, 16) * 16 + 2 * tiles * element_bytes  # statuses, then aggregates and prefixes


def plan(n: int, dtype: str, exclusive: bool, aligned: bool, staged: bool = False, items: int = 0,
         early: bool = False, threads: int = THREADS, packed: bool = True) -> dict:
    """Kernel name, tiles (one block each) and the bytes of counter and tile state the look-back needs.
    ``items`` elements per thread; 0: the default (128 bytes a thread). ``early``: look back right
    after the up-sweep, before the down-sweep; ``packed``: one {status, value} word a tile (blelloch.cu)."""
    if dtype not in CUDA_TYPES:
        raise Unsupported(f"{dtype}: blelloch scans int32, int64 or fp32")
    if threads not in THREAD_CHOICES:
        raise Unsupported(f"threads={threads}: use one of {', '.join(map(str, THREAD_CHOICES))}")
    t, default_items = CUDA_TYPES[dtype]
    items = items or default_items
    allowed = [i for i in ITEM_CHOICES if i * ELEMENT_BYTES[dtype] % 16 == 0]
    if items not in allowed:
        raise Unsupported(f"items={items}: use 0 (the default, {default_items}) or one of "
                          f"{', '.join(map(str, allowed))}")
    tile = threads * items
    tiles = _cupy.ceil_div(n, tile)
    staged = staged and aligned  # the staged copies are 16-byte ones
    flags = ", ".join(str(b).lower() for b in (exclusive, aligned, staged, early, packed))
    return {"name": f"scan_blelloch<{t}, {threads}, {items}, {flags}>", "grid": (tiles,), "block": (threads,),
            "tile": tile, "state_bytes": COUNTER_BYTES + state_bytes(tiles, ELEMENT_BYTES[dtype], packed),
            "staged": staged, "early": early, "packed": packed}


def _early(lookback: str) -> bool:
    if lookback not in ("late", "early"):
        raise Unsupported(f"lookback={lookback!r}: use late (after the down-sweep) or early (before it)")
    return lookback == "early"


def _packed(state: str) -> bool:
    if state not in ("packed", "split"):
        raise Unsupported(f"state={state!r}: use packed (one status-and-value word a tile) or split")
    return state == "packed"


def _plan_from_params(case, params: dict, aligned: bool) -> dict:
    """plan() for a case and the implementation's --param values (explain and the launch share it)."""
    return plan(case.n, case.dtype, case.exclusive, aligned, staged=bool(int(params["staged"])),
                items=int(params["items"]), early=_early(params.get("lookback", "late")),
                threads=int(params.get("threads", THREADS)), packed=_packed(params.get("state", "packed")))


def explain(case, params) -> dict:
    """`kbench explain scan --impl blelloch`: the tiles, the sweeps and the look-back for this case."""
    try:
        p = _plan_from_params(case, params, aligned=True)
    except Unsupported as exc:
        return {"configuration": f"not runnable: {exc}"}
    blocks, threads = _cupy.launch_size(p)
    items = p["tile"] // threads
    e = ELEMENT_BYTES[case.dtype]
    levels = threads.bit_length() - 1  # of each sweep over the thread totals
    wide = [d for d in (1 << i for i in range(levels)) if threads // (2 * d) > 32]
    state = (f"one {2 * e}-byte status-and-value word a tile, read and written in one access"
             if p["packed"] else "a status, an aggregate and a prefix a tile, fenced apart")
    return {
        "kernel": p["name"],
        "grid": f"{blocks:,} tiles of {p['tile']:,} elements ({p['tile'] * e:,} bytes), one block of {threads} "
                f"threads each, in the order of a global tile counter",
        "per thread": f"{items} consecutive elements scanned serially in registers"
                      + ("; each warp loads and stores its part of the tile through shared memory with coalesced "
                         "16-byte accesses" if p["staged"] else "; its own 16-byte loads and stores"),
        f"Blelloch sweeps of the {threads} thread totals": f"{2 * levels} levels; the {2 * len(wide)} with more than "
                                                          f"32 threads adding behind block barriers, the rest in warp 0 "
                                                          f"(__syncwarp)",
        "decoupled look-back": f"warp 0, {'before' if p['early'] else 'after'} the down-sweep, reads up to 32 "
                               f"predecessors' state at a time; {state}; {p['state_bytes']:,} bytes (with the "
                               f"tile counter) zeroed before each launch",
        "global traffic": f"{case.n * e:,} bytes read + {case.n * e:,} written, plus a few state words a tile",
        **_cupy.resource_figures(SOURCE, p["name"], blocks, threads),
    }


@implementation(
    "scan", "blelloch", backend="cupy", cuda=True, modules=("torch", "cupy"), unit="memory",
    dtypes=tuple(CUDA_TYPES), params={"staged": 1, "items": 0, "lookback": "late", "threads": THREADS,
                                      "state": "packed"},
    explain=explain,
    description="one pass: Blelloch up/down-sweep per tile in shared memory, decoupled look-back across tiles",
)
def blelloch(case, inputs, out, staged=1, items=0, lookback="late", threads=THREADS, state="packed"):
    """``--param staged=0``: each thread loads its own elements (1, the default: full tiles loaded and
    stored coalesced through shared memory, blelloch.cu); ``--param items=16``: elements per thread
    (0: 32 for 4-byte types, 16 for int64); ``--param lookback=early``: publish the tile's aggregate and
    look back before the down-sweep; ``--param threads=128``: the block size; ``--param state=split``:
    statuses and values in separate arrays, fenced apart (packed, the default: one {status, value} word a
    tile, no fences; on the H200 1.19x torch.cumsum for int32 against split's 0.94x, docs/performance.md)."""
    import numpy as np
    import torch

    x = inputs["x"]
    aligned = x.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0
    params = {"staged": staged, "items": items, "lookback": lookback, "threads": threads, "state": state}
    p = _plan_from_params(case, params, aligned)
    kernel = _cupy.compiled(str(SOURCE), p["name"])
    # the tile counter (first 16 bytes) and the tiles' look-back state after it, zeroed together
    scratch = torch.empty(_cupy.ceil_div(p["state_bytes"], 16) * 16, dtype=torch.uint8, device=x.device)
    args = (*_cupy.pointer_args(x, out), np.int64(case.n), *_cupy.pointer_args(scratch, scratch[COUNTER_BYTES:]))

    def body():
        scratch.zero_()
        if case.n:
            kernel(p["grid"], p["block"], args)

    run = _cupy.on_torch_stream(body)
    run.config = {"tile_elements": p["tile"], "tiles": p["grid"][0], "vector_loads": aligned,
                  "staged": p["staged"], "packed": p["packed"],
                  **_cupy.kernel_config(kernel, p["grid"], p["block"])}
    return run
