"""The work-efficient (Blelloch) tile scan, joined across tiles in one pass or three (CuPy RawKernels,
``blelloch.cu`` beside this file).

Every variant scans a tile of THREADS x ITEMS elements the same way: each thread its ITEMS
consecutive elements serially in registers, then the Blelloch up-sweep/down-sweep over the THREADS
thread totals in shared memory. What the ``--param`` values change, each measurable on its own:

- ``passes=1`` (default): one pass, tiles joined by decoupled look-back over one {status, value}
  word a tile (``state=packed``) or a status array with the values apart (``state=split``);
  ``passes=3`` (with ``prefetch=0``): the textbook's three passes (scan the tiles writing their
  totals, scan the totals with the same kernel level by level, add each tile's prefix), which read
  and write y twice.
- ``prefetch=0`` (default): one tile a block, nothing loading while warp 0 looks back;
  ``prefetch=1`` or ``2``: persistent blocks that keep the loads of their next 1 or 2 tiles in flight
  (cp.async into shared memory) while they scan and look back the current one.
- ``items``: elements a thread (whole 16-byte vectors; 0: the default for the dtype and variant),
  loaded with 16-byte accesses where the tensors are aligned and element by element for a tail.
- ``staged=0`` (with ``prefetch=0``): each thread loads its own vectors instead of the warp's
  coalesced copy through shared memory; ``lookback=early``: publish and look back right after the
  up-sweep; ``threads=128``; ``backoff=NS``: sleep NS nanoseconds between polls of a tile that has
  published nothing yet; ``window=W``: each look-back step reads 32 x W predecessors' state, W a lane
  with independent loads (1: 32 a step, one a lane); ``stride``: bytes from one tile's packed state word
  to the next, 0 (densely packed), 32 (a sector a tile) or 128 (a line a tile); ``auto``, the default,
  takes 128 for packed state, so that the words a look-back step reads fall in different L2 lines
  (on an H200, 1.20x torch.cumsum densely packed, 1.44x a line apart, int32 2^28).

The tile counter and the look-back state are zeroed by the closure before each launch (one memset);
every buffer is allocated once, here, outside the timed closure.
"""

from pathlib import Path

from kbench.dtypes import ELEMENT_BYTES
from kbench.loader import load_helper
from kbench.registry import Unsupported, implementation

SOURCE = Path(__file__).with_suffix(".cu")
THREADS = 256  # the default block; --param threads= picks one of THREAD_CHOICES
THREAD_CHOICES = (128, 256)
COUNTER_BYTES = 16  # the tile counter, padded so the tile state after it stays 16-byte aligned
CUDA_TYPES = {"int32": "int", "fp32": "float", "int64": "long long"}
ITEM_CHOICES = (4, 8, 16, 32)  # elements per thread --param items= may ask for (whole 16-byte vectors)
PASSES = (1, 3)
PREFETCH_CHOICES = (0, 1, 2)
WINDOWS = (1, 2, 4)  # predecessors a lane reads in one look-back step
STRIDES = (0, 32, 128)  # bytes from one tile's packed state word to the next (0: dense, the word's size)
AUTO_STRIDE = 128  # stride=auto with packed state: a line a tile
MAX_BACKOFF_NS = 10_000
STATIC_SMEM_LIMIT = 48 * 1024  # above it a kernel must opt in to more dynamic shared memory
# Bytes a thread by default. One tile a block (prefetch=0, and the three-pass tile scan): 128 (the H200
# sweep, docs/performance.md: int32 16 items 0.74x torch.cumsum, 32 items 0.92x; int64 8 0.61x, 16 0.79x).
# Pipelined (prefetch >= 1): 64, so that two stages of a 256-thread block take 36 KiB of shared memory
# and five blocks fit an SM.
DEFAULT_THREAD_BYTES = {0: 128, 1: 64, 2: 64}

_cupy = load_helper(Path(__file__).parent.parent / "_cupy_common.py")


def state_bytes(tiles: int, element_bytes: int, packed: bool, stride: int = 0) -> int:
    """Bytes of look-back state for `tiles` tiles, laid out as blelloch.cu's TileState reads it (keep the
    two in step)."""
    if packed:  # {value, status}: 8 bytes for 4-byte types, 16 for 8-byte ones, ``stride`` apart (0: dense)
        return tiles * (stride or 2 * element_bytes)
    return _cupy.ceil_div(tiles * 4, 16) * 16 + 2 * tiles * element_bytes  # statuses, then aggregates and prefixes


def stage_bytes(tile: int, element_bytes: int) -> int:
    """Shared memory of one staged tile: 16 bytes of padding after every 32 elements (blelloch.cu's
    stage_elements)."""
    return (tile + tile // 32 * (16 // element_bytes)) * element_bytes


def multipass_levels(n: int, tile: int) -> list[int]:
    """The element counts the three-pass scan works on: n, then its tiles' totals, then theirs, until one
    tile holds a level (whose exclusive scan then needs no prefix of its own)."""
    levels = [n]
    while levels[-1] > tile:
        levels.append(_cupy.ceil_div(levels[-1], tile))
    return levels


def default_items(dtype: str, prefetch: int) -> int:
    return DEFAULT_THREAD_BYTES[prefetch] // ELEMENT_BYTES[dtype]


def plan(n: int, dtype: str, exclusive: bool, aligned: bool, *, passes: int = 1, prefetch: int = 0,
         items: int = 0, staged: bool = True, early: bool = False, threads: int = THREADS,
         packed: bool = True, resident: int | None = None, window: int = 1, stride: int | str = "auto") -> dict:
    """What the closure launches for one case: the tile, the kernels (name, grid, block, dynamic shared
    memory) and the bytes of counter and tile state the look-back needs.

    ``items`` 0: the default for the dtype and variant. ``resident``: blocks that fit the GPU at once, the
    pipelined kernel's grid (its blocks loop over the tiles); None: one block a tile at most."""
    if dtype not in CUDA_TYPES:
        raise Unsupported(f"{dtype}: blelloch scans int32, int64 or fp32")
    if passes not in PASSES:
        raise Unsupported(f"passes={passes}: use 1 (decoupled look-back) or 3 (scan tiles, scan their totals, add)")
    spaced_asked, stride = stride not in ("auto", 0, "0"), resolve_stride(stride, packed)
    for name, value, choices in (("prefetch", prefetch, PREFETCH_CHOICES), ("stride", stride, STRIDES),
                                 ("window", window, WINDOWS), ("threads", threads, THREAD_CHOICES)):
        if value not in choices:
            raise Unsupported(f"{name}={value}: use one of {', '.join(map(str, choices))}")
    if stride and not packed:
        raise Unsupported(f"stride={stride} spaces the packed state words: it needs state=packed")
    if passes == 3 and (prefetch or early or not packed or window != 1 or spaced_asked):
        raise Unsupported("passes=3 joins the tiles without a look-back: it takes prefetch=0 and the default "
                          "lookback, state, window and stride (--param passes=3 --param prefetch=0)")
    if passes == 1 and prefetch and not staged:
        raise Unsupported("staged=0 loads each thread's own vectors, one tile a block: it needs prefetch=0 "
                          "(prefetch copies the next tiles through shared memory)")
    e = ELEMENT_BYTES[dtype]
    t = CUDA_TYPES[dtype]
    default = default_items(dtype, prefetch)
    items = items or default
    if items not in ITEM_CHOICES or items * e % 16:
        raise Unsupported(f"items={items}: use 0 (the default, {default}) or one of "
                          f"{', '.join(str(i) for i in ITEM_CHOICES if i * e % 16 == 0)}")
    tile = threads * items
    tiles = _cupy.ceil_div(n, tile)
    staged_asked, staged = staged, staged and aligned  # the staged copies are 16-byte ones
    stage = stage_bytes(tile, e)

    p = {"tile": tile, "tiles": tiles, "items": items, "threads": threads, "passes": passes, "prefetch": prefetch,
         "staged": staged, "early": early, "packed": packed, "block": (threads,)}
    if passes == 3:
        levels = multipass_levels(n, tile)
        p["levels"] = levels
        p["launches"] = three_pass_launches(levels, tile, t, threads, items, exclusive, aligned, staged_asked, stage)
        p["smem"] = max((launch["smem"] for launch in p["launches"]), default=0)
        p["state_bytes"] = 0
        return p
    # the kernels' last template arguments, left out at their template defaults (window 1, stride 0)
    widened = (window, stride) if stride else (window,) if window != 1 else ()
    p["window"] = window
    if prefetch:
        p["name"] = _cupy.instance_name("scan_blelloch_pipelined", t, threads, items, exclusive, aligned, prefetch,
                                        early, packed, *widened)
        p["grid"] = (min(tiles, resident) if resident else tiles,)
        p["smem"] = (prefetch + 1) * stage if aligned else 0  # unaligned tiles are read in place, never staged
    else:
        p["name"] = _cupy.instance_name("scan_blelloch", t, threads, items, exclusive, aligned, staged, early, packed,
                                        *widened)
        p["grid"] = (tiles,)
        p["smem"] = stage if staged else 0
    p["stride"] = stride
    p["state_bytes"] = COUNTER_BYTES + state_bytes(tiles, e, packed, stride)
    return p


def three_pass_launches(levels: list[int], tile: int, t: str, threads: int, items: int, exclusive: bool,
                        aligned: bool, staged: bool, stage: int) -> list[dict]:
    """The three-pass scan's launches in order (``staged``: as asked; only aligned levels are staged), each naming its buffers: level 0 reads "x" and writes "y";
    level l >= 1 scans ("sums", l), the totals of level l - 1's tiles, into ("scan", l), exclusively.
    First every level's tile scan (each writing its tiles' totals to the next level's "sums"), then,
    from the top level down, each level's tiles get the prefix the level above computed for them."""
    top = len(levels) - 1
    out = []
    for level, count in enumerate(levels):
        if count == 0:
            break
        vector = aligned or level > 0  # the levels above 0 are buffers kbench allocates: aligned
        stage_level = staged and vector
        out.append({
            "kernel": "tiles", "level": level,
            "name": _cupy.instance_name("scan_blelloch_tiles", t, threads, items, exclusive or level > 0, vector,
                                        stage_level),
            "grid": (_cupy.ceil_div(count, tile),), "block": (threads,), "smem": stage if stage_level else 0,
            "input": "x" if level == 0 else ("sums", level), "output": "y" if level == 0 else ("scan", level),
            "n": count, "tile_sums": ("sums", level + 1) if level < top else None,
        })
    for level in range(top - 1, -1, -1):
        vector = aligned or level > 0
        out.append({
            "kernel": "add", "level": level,
            "name": _cupy.instance_name("add_tile_prefix", t, threads, items, vector),
            "grid": (levels[level + 1] - 1,), "block": (threads,), "smem": 0,
            "output": "y" if level == 0 else ("scan", level), "n": levels[level],
            "prefixes": ("scan", level + 1),
        })
    return [launch for launch in out if launch["grid"][0] > 0]


def resolve_stride(stride, packed: bool) -> int:
    """stride=auto as the bytes it takes: a line a tile for packed state, nothing for split (whose
    statuses and values are arrays of their own); a number as given (--param gives a string)."""
    if stride == "auto":
        return AUTO_STRIDE if packed else 0
    return int(stride)


def _early(lookback: str) -> bool:
    if lookback not in ("late", "early"):
        raise Unsupported(f"lookback={lookback!r}: use late (after the down-sweep) or early (before it)")
    return lookback == "early"


def _packed(state: str) -> bool:
    if state not in ("packed", "split"):
        raise Unsupported(f"state={state!r}: use packed (one status-and-value word a tile) or split")
    return state == "packed"


def _plan_from_params(case, params: dict, aligned: bool, resident: int | None = None) -> dict:
    """plan() for a case and the implementation's --param values (explain and the launch share it)."""
    return plan(case.n, case.dtype, case.exclusive, aligned, passes=int(params.get("passes", 1)),
                prefetch=int(params.get("prefetch", 1)), items=int(params.get("items", 0)),
                staged=bool(int(params.get("staged", 1))), early=_early(params.get("lookback", "late")),
                threads=int(params.get("threads", THREADS)), packed=_packed(params.get("state", "packed")),
                resident=resident, window=int(params.get("window", 1)), stride=params.get("stride", "auto"))


def resident_blocks(kernel, threads: int, smem: int, device) -> int:
    """Blocks of `kernel` the whole GPU holds at once (the pipelined kernel's grid), from its registers
    and shared memory (kbench.occupancy's limits); a GPU outside that table gets 2048 threads an SM,
    an upper bound (blocks past residency start as others finish, find no tile left and exit)."""
    import torch

    from kbench.occupancy import LIMITS, blocks_per_sm

    props = torch.cuda.get_device_properties(device)
    capability = (props.major, props.minor)
    if capability in LIMITS:
        fit = blocks_per_sm(threads, kernel.num_regs, kernel.shared_size_bytes + smem, capability)
        per_sm = fit["blocks_per_sm"]
    else:
        per_sm = 2048 // threads
    return max(1, per_sm) * props.multi_processor_count


def explain(case, params) -> dict:
    """`kbench explain scan --impl blelloch`: the tiles, the sweeps and how the tiles are joined."""
    try:
        p = _plan_from_params(case, params, aligned=True)
    except Unsupported as exc:
        return {"configuration": f"not runnable: {exc}"}
    threads, items, e, tile = p["threads"], p["items"], ELEMENT_BYTES[case.dtype], p["tile"]
    levels = threads.bit_length() - 1  # of each sweep over the thread totals
    wide = [d for d in (1 << i for i in range(levels)) if threads // (2 * d) > 32]
    tiles = f"{p['tiles']:,} tiles of {tile:,} elements ({tile * e:,} bytes)"
    figures = {"kernel": p["name"] if p["passes"] == 1 else
               ", ".join(dict.fromkeys(launch["name"] for launch in p["launches"]))}
    if p["prefetch"]:
        figures["grid"] = (f"{tiles} over persistent blocks of {threads} threads, as many as fit the GPU, each "
                           f"taking its next tile from a global tile counter")
        figures["prefetch"] = (f"the loads of a block's next {p['prefetch']} tile{'s' if p['prefetch'] > 1 else ''} in "
                               f"flight (cp.async into {p['prefetch'] + 1} shared-memory stages of "
                               f"{stage_bytes(tile, e):,} bytes) while it scans and looks back the current one")
    elif p["passes"] == 1:
        figures["grid"] = f"{tiles}, one block of {threads} threads each, in the order of a global tile counter"
    else:
        figures["grid"] = f"{tiles}, one block of {threads} threads each"
    figures["per thread"] = (f"{items} consecutive elements scanned serially in registers"
                             + ("; each warp loads and stores its part of the tile through shared memory with "
                                "coalesced 16-byte accesses" if p["staged"] else "; its own 16-byte loads and stores"))
    figures[f"Blelloch sweeps of the {threads} thread totals"] = (
        f"{2 * levels} levels; the {2 * len(wide)} with more than 32 threads adding behind block barriers, the rest "
        f"in warp 0 (__syncwarp)")
    if p["passes"] == 3:
        counts = ", ".join(f"{count:,}" for count in p["levels"])
        figures["passes"] = (f"levels of {counts} elements: each level's tiles scanned on their own, writing their "
                             f"totals to the next level ({len(p['levels'])} launches), then each level's tiles given the "
                             f"prefix the level above computed ({len(p['levels']) - 1} launches)")
        figures["global traffic"] = (f"{case.n * e:,} bytes read + {case.n * e:,} written, then y read and written "
                                     f"again to add the tile prefixes: {4 * case.n * e:,} bytes, twice one pass's")
        first = p["launches"][0] if p["launches"] else None
        if first:
            figures.update(_cupy.resource_figures(SOURCE, first["name"], first["grid"][0], threads, first["smem"]))
        return figures
    spaced = f" ({p['stride']} bytes apart)" if p["stride"] else ""
    state = (f"one {2 * e}-byte status-and-value word a tile{spaced}, one relaxed access each way" if p["packed"] else
             "a status (release/acquire), an aggregate and a prefix a tile")
    step = 32 * p["window"]
    figures["decoupled look-back"] = (f"warp 0, {'before' if p['early'] else 'after'} the down-sweep, reads up to {step} "
                                      f"predecessors' state at a time ({p['window']} a lane); {state}; "
                                      f"{p['state_bytes']:,} bytes (with the tile counter) zeroed before each launch")
    figures["global traffic"] = f"{case.n * e:,} bytes read + {case.n * e:,} written, plus a few state words a tile"
    figures.update(_cupy.resource_figures(SOURCE, p["name"], p["tiles"], threads, p["smem"]))
    return figures


def _backoff(value: int) -> str | None:
    return None if 0 <= value <= MAX_BACKOFF_NS else f"must be 0 to {MAX_BACKOFF_NS:,} (nanoseconds between polls)"


@implementation(
    "scan", "blelloch", backend="cupy", cuda=True, modules=("torch", "cupy"), min_cc=(8, 0), unit="memory",
    dtypes=tuple(CUDA_TYPES),
    params={"passes": 1, "prefetch": 0, "items": 0, "staged": 1, "lookback": "late", "threads": THREADS,
            "state": "packed", "backoff": 0, "window": 1, "stride": "auto"},
    allowed={"passes": PASSES, "prefetch": PREFETCH_CHOICES, "items": (0, *ITEM_CHOICES), "staged": (0, 1),
             "lookback": ("late", "early"), "threads": THREAD_CHOICES, "state": ("packed", "split"),
             "backoff": _backoff, "window": WINDOWS, "stride": ("auto", *map(str, STRIDES))},
    explain=explain,
    description="Blelloch up/down-sweep per tile in shared memory; one pass, decoupled look-back "
                "(--param prefetch=1,2: persistent blocks with the next tiles' loads in flight)",
)
def blelloch(case, inputs, out, passes=1, prefetch=0, items=0, staged=1, lookback="late", threads=THREADS,
             state="packed", backoff=0, window=1, stride="auto"):
    """``--param prefetch=0`` (the default): one tile a block (1: persistent blocks with the next tile's
    loads in flight during the look-back; 2: the next two); ``passes=3`` (with prefetch=0): the textbook's
    three passes instead of one; ``items=``: elements a thread; ``staged=0`` (with prefetch=0): per-thread
    loads; ``lookback=early``; ``threads=128``; ``state=split``: statuses and values apart; ``backoff=NS``
    between polls; ``window=W``: W predecessors a lane per look-back step; ``stride=B``: B bytes from one
    tile's state word to the next. passes=3 takes items, threads and staged (it has no look-back to tune)."""
    import numpy as np
    import torch

    x = inputs["x"]
    aligned = x.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0
    params = {"passes": passes, "prefetch": prefetch, "items": items, "staged": staged, "lookback": lookback,
              "threads": threads, "state": state, "window": window, "stride": stride}
    p = _plan_from_params(case, params, aligned)
    limit = _cupy.smem_optin_limit(x)
    if p["smem"] > limit:
        raise Unsupported(f"needs {p['smem'] // 1024} KiB of shared memory a block; this GPU allows {limit // 1024} KiB "
                          f"(fewer items or prefetch)")
    if p["passes"] == 3:
        if backoff:
            raise Unsupported("passes=3 joins the tiles without a look-back: backoff does not apply")
        return _three_pass(case, x, out, p)

    kernel = _cupy.compiled(str(SOURCE), p["name"])
    if p["smem"] > STATIC_SMEM_LIMIT:
        kernel.max_dynamic_shared_size_bytes = p["smem"]
    if p["prefetch"]:
        p = _plan_from_params(case, params, aligned, resident_blocks(kernel, threads, p["smem"], x.device))
    # the tile counter (first 16 bytes) and the tiles' look-back state after it, zeroed together
    scratch = torch.empty(_cupy.ceil_div(p["state_bytes"], 16) * 16, dtype=torch.uint8, device=x.device)
    args = (*_cupy.pointer_args(x, out), np.int64(case.n), *_cupy.pointer_args(scratch, scratch[COUNTER_BYTES:]),
            np.uint32(backoff))

    def body():
        scratch.zero_()
        if case.n:
            kernel(p["grid"], p["block"], args, shared_mem=p["smem"])

    run = _cupy.on_torch_stream(body)
    run.config = {"passes": 1, "tile_elements": p["tile"], "tiles": p["tiles"], "items": p["items"],
                  "prefetch": p["prefetch"], "vector_loads": aligned, "staged": p["staged"], "packed": p["packed"],
                  "backoff_ns": backoff, "window": p["window"], "state_stride": p["stride"], **_cupy.kernel_config(kernel, p["grid"], p["block"], p["smem"])}
    return run


def _three_pass(case, x, out, p: dict):
    """The closure of passes=3: the launches of three_pass_launches, their buffers allocated here."""
    import numpy as np
    import torch

    levels = p["levels"]
    buffers = {"x": x, "y": out}
    for level in range(1, len(levels)):
        buffers[("sums", level)] = torch.empty(levels[level], dtype=x.dtype, device=x.device)
        buffers[("scan", level)] = torch.empty(levels[level], dtype=x.dtype, device=x.device)
    calls = []
    for launch in p["launches"]:
        kernel = _cupy.compiled(str(SOURCE), launch["name"])
        if launch["smem"] > STATIC_SMEM_LIMIT:
            kernel.max_dynamic_shared_size_bytes = launch["smem"]
        if launch["kernel"] == "tiles":
            sums = buffers[launch["tile_sums"]] if launch["tile_sums"] else None
            args = (*_cupy.pointer_args(buffers[launch["input"]], buffers[launch["output"]]), np.int64(launch["n"]),
                    np.uint64(sums.data_ptr() if sums is not None else 0))
        else:
            args = (*_cupy.pointer_args(buffers[launch["output"]]), np.int64(launch["n"]),
                    *_cupy.pointer_args(buffers[launch["prefixes"]]))
        calls.append((kernel, launch["grid"], launch["block"], args, launch["smem"]))

    def body():
        for kernel, grid, block, args, smem in calls:
            kernel(grid, block, args, shared_mem=smem)

    run = _cupy.on_torch_stream(body)
    # The launches hold raw pointers: the closure keeps the level buffers alive (freed, their memory
    # would go to the next tensors allocated, which the launches would then overwrite).
    run.workspace = buffers
    first = calls[0][0] if calls else None
    run.config = {"passes": 3, "tile_elements": p["tile"], "items": p["items"], "levels": levels,
                  "launches": len(calls), "staged": p["staged"],
                  **(_cupy.kernel_config(first, p["launches"][0]["grid"], p["block"], p["launches"][0]["smem"])
                     if first else {})}
    return run
