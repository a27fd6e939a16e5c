"""The scan suite's kernels on the CPU: blelloch's parameters refused before anything runs, its launch
plans (the pipelined one-pass kernel, one tile a block, the three-pass levels and launches, emulated
here against cumsum), the shared memory and resident grid it asks for, the benchmark plan, and the
optional cub-scan peer's handling of the cuda-cccl API generations, with stand-in modules."""

import sys
import types

import pytest

from kbench.errors import UserError
from kbench.registry import Unsupported, skip_reason, variants
from kbench.suite import Case


def scan_case(n, dtype="int32", exclusive=False):
    return Case({"n": n, "dtype": dtype, "exclusive": exclusive})


@pytest.fixture(scope="module")
def blelloch(registry):
    return sys.modules[registry.implementations("scan")["blelloch"].make.__module__]


@pytest.fixture(scope="module")
def cub(registry):
    return sys.modules[registry.implementations("scan")["cub-scan"].make.__module__]


# --- parameters ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,value,fragment", [
    ("passes", "2", "'2' is not one of 1, 3"),
    ("prefetch", "3", "'3' is not one of 0, 1, 2"),
    ("items", "64", "'64' is not one of 0, 4, 8, 16, 32"),
    ("threads", "512", "'512' is not one of 128, 256"),
    ("state", "fenced", "'fenced' is not one of packed, split"),
    ("lookback", "never", "'never' is not one of late, early"),
    ("backoff", "20000", "must be 0 to 10,000 (nanoseconds between polls)"),
    ("backoff", "-1", "must be 0 to 10,000"),
])
def test_a_value_blelloch_does_not_take_is_refused_before_anything_runs(registry, name, value, fragment):
    impl = registry.implementations("scan")["blelloch"]
    with pytest.raises(UserError, match="--param") as caught:
        variants([impl], {name: [value]})
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_a_bad_param_on_the_command_line_is_one_line_and_exit_2(cli, tmp_path):
    result = cli("run", "scan", "--n", "1000", "--impl", "blelloch", "--param", "prefetch=5",
                 "--out", tmp_path / "x.jsonl")
    assert result.exit_code == 2
    assert "--param prefetch (for blelloch): '5' is not one of 0, 1, 2" in result.output
    assert "Traceback" not in result.output


def test_every_new_value_is_a_variant_of_its_own(registry):
    impl = registry.implementations("scan")["blelloch"]
    labels = [v.label for v in variants([impl], {"passes": ["1", "3"], "prefetch": ["0", "1", "2"]})]
    assert labels == ["blelloch", "blelloch[prefetch=1]", "blelloch[prefetch=2]", "blelloch[passes=3]",
                      "blelloch[passes=3,prefetch=1]", "blelloch[passes=3,prefetch=2]"]
    assert impl.params["passes"] == 1 and impl.params["prefetch"] == 0 and impl.needs.min_cc == (8, 0)


# --- one pass: the pipelined kernel and one tile a block ---------------------------------------------------

def test_prefetch_is_the_pipelined_one_pass_kernel(blelloch):
    p = blelloch.plan(1 << 28, "int32", False, True, prefetch=1, resident=660)
    assert p["name"] == "scan_blelloch_pipelined<int, 256, 16, false, true, 1, false, true, 1, 128>"
    # 64 bytes a thread: 4,096-element tiles; the grid is what fits the GPU, the blocks loop over the tiles
    assert p["tile"] == 4096 and p["tiles"] == 65536 and p["grid"] == (660,) and p["block"] == (256,)
    assert p["smem"] == 2 * (4096 + 128 * 4) * 4  # two stages, 16 bytes of padding every 32 elements
    assert p["state_bytes"] == 16 + 65536 * 128  # the counter, then one 8-byte word a tile, a line apart
    assert blelloch.plan(1000, "int32", False, True, prefetch=1, resident=660)["grid"] == (1,)  # no more blocks than tiles
    assert blelloch.plan(1 << 20, "int32", False, True, prefetch=1)["grid"] == (256,)  # resident unknown: a block a tile
    assert blelloch.plan(0, "fp32", False, True, prefetch=1, resident=660)["grid"] == (0,)
    p = blelloch.plan(5000, "int64", True, True, prefetch=2, packed=False, early=True)
    assert p["name"] == "scan_blelloch_pipelined<long long, 256, 8, true, true, 2, true, false>"
    assert p["tile"] == 2048 and p["smem"] == 3 * (2048 + 64 * 2) * 8
    assert p["state_bytes"] == 16 + 16 + 2 * 3 * 8  # three statuses padded to 16 bytes, then 2 x 3 values
    unaligned = blelloch.plan(5000, "fp32", False, False, prefetch=1)
    assert unaligned["name"] == "scan_blelloch_pipelined<float, 256, 16, false, false, 1, false, true, 1, 128>"
    assert unaligned["smem"] == 0 and not unaligned["staged"]  # read in place: nothing to stage


def test_one_tile_a_block_keeps_its_shapes(blelloch):
    p = blelloch.plan(1 << 28, "int32", False, True, prefetch=0)
    assert p["name"] == "scan_blelloch<int, 256, 32, false, true, true, false, true, 1, 128>"  # 128 bytes a thread
    assert p["tile"] == 8192 and p["grid"] == (32768,) and p["smem"] == (8192 + 256 * 4) * 4
    p = blelloch.plan(1 << 28, "int32", False, True, prefetch=0, items=16, packed=False)
    assert p["tile"] == 4096 and p["grid"] == (65536,) and p["state_bytes"] == 16 + 65536 * 12
    p = blelloch.plan(4097, "int64", True, False, prefetch=0, packed=False)
    assert p["name"] == "scan_blelloch<long long, 256, 16, true, false, false, false, false>"
    assert p["grid"] == (2,) and p["smem"] == 0  # unaligned: per-thread loads, no stage
    p = blelloch.plan(4097, "int32", False, True, prefetch=0, staged=False, threads=128)
    assert p["name"] == "scan_blelloch<int, 128, 32, false, true, false, false, true, 1, 128>" and p["smem"] == 0
    assert blelloch.plan(100, "int64", False, True, prefetch=0, items=4)["tile"] == 1024
    # the look-back step and the state words' spacing are the kernels' last template arguments, left out
    # at their template defaults (1, 0: densely packed)
    assert blelloch.plan(4097, "int32", False, True, prefetch=0, window=4)["name"] == \
        "scan_blelloch<int, 256, 32, false, true, true, false, true, 4, 128>"
    assert blelloch.plan(4097, "int32", False, True, prefetch=1, window=2, stride=0)["name"].endswith("false, true, 2>")
    assert blelloch.plan(4097, "int32", False, True, prefetch=0, stride="0")["name"].endswith("false, true>")
    spaced = blelloch.plan(8193, "int32", False, True, prefetch=0, stride=128)  # two tiles
    assert spaced["name"].endswith("false, true, 1, 128>") and spaced["state_bytes"] == 16 + 2 * 128
    assert blelloch.plan(8193, "int32", False, True, prefetch=0, stride=0)["state_bytes"] == 16 + 2 * 8
    assert blelloch.plan(8193, "int32", False, True, prefetch=0, stride="auto")["state_bytes"] == 16 + 2 * 128


@pytest.mark.parametrize("kwargs,fragment", [
    ({"items": 2}, "items=2"), ({"items": 64}, "items=64"), ({"threads": 512}, "threads=512"),
    ({"passes": 2}, "passes=2"), ({"prefetch": 3}, "prefetch=3"),
    ({"staged": False, "prefetch": 1}, "staged=0 loads each thread's own vectors"),  # prefetch copies through shared memory
    ({"window": 3}, "window=3"), ({"passes": 3, "prefetch": 0, "window": 2}, "default lookback, state, window and stride"),
    ({"stride": 64}, "stride=64"), ({"stride": 32, "packed": False}, "needs state=packed"),
])
def test_plans_blelloch_cannot_launch_are_unsupported(blelloch, kwargs, fragment):
    with pytest.raises(Unsupported, match=fragment):
        blelloch.plan(100, "int32", False, True, **kwargs)


def test_a_dtype_blelloch_does_not_scan_is_unsupported(blelloch):
    with pytest.raises(Unsupported, match="fp16"):
        blelloch.plan(10, "fp16", False, True)
    assert blelloch.plan(100, "int32", False, True, staged=False, prefetch=0)["prefetch"] == 0


def test_resident_blocks_come_from_the_kernels_resources(blelloch, monkeypatch):
    import torch

    class Props:
        major, minor, multi_processor_count = 9, 0, 132

    class Kernel:
        num_regs, shared_size_bytes = 32, 1088

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: Props)
    # 36,864 dynamic + 1,088 static + 1 KiB reserved a block: 5 fit 228 KiB
    assert blelloch.resident_blocks(Kernel, 256, 36864, "cuda") == 5 * 132
    Props.major, Props.minor = 12, 0  # outside kbench.occupancy's table: 2048 threads an SM
    assert blelloch.resident_blocks(Kernel, 256, 36864, "cuda") == 8 * 132


# --- three passes ---------------------------------------------------------------------------------------------

def test_multipass_levels(blelloch):
    assert blelloch.multipass_levels(1 << 28, 8192) == [1 << 28, 32768, 4]
    assert blelloch.multipass_levels(8193, 8192) == [8193, 2]
    assert blelloch.multipass_levels(8192, 8192) == [8192]
    assert blelloch.multipass_levels(1, 8192) == [1] and blelloch.multipass_levels(0, 8192) == [0]
    assert blelloch.multipass_levels(1000, 4) == [1000, 250, 63, 16, 4]


def emulate(launches, levels, x, tile):
    """What blelloch.cu's three-pass kernels do with the buffers the launches name, in numpy."""
    import numpy as np

    buffers = {"x": x, "y": np.full_like(x, -12345)}
    for level in range(1, len(levels)):
        buffers[("sums", level)] = np.full(levels[level], -777, dtype=x.dtype)
        buffers[("scan", level)] = np.full(levels[level], -999, dtype=x.dtype)
    for launch in launches:
        n, (grid,) = launch["n"], launch["grid"]
        if launch["kernel"] == "tiles":
            src, dst = buffers[launch["input"]], buffers[launch["output"]]
            exclusive = launch["name"].split(", ")[3] == "true"
            assert launch["grid"] == (-(-n // tile),)
            for t in range(grid):
                part = src[t * tile:min(n, (t + 1) * tile)]
                scanned = np.cumsum(part)
                dst[t * tile:t * tile + len(part)] = scanned - part if exclusive else scanned
                if launch["tile_sums"]:
                    buffers[launch["tile_sums"]][t] = part.sum()
        else:
            dst, prefixes = buffers[launch["output"]], buffers[launch["prefixes"]]
            for t in range(1, grid + 1):  # tile 0's prefix is 0: not launched
                dst[t * tile:min(n, (t + 1) * tile)] += prefixes[t]
    return buffers["y"]


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("tile", [4, 16])
@pytest.mark.parametrize("n", [0, 1, 4, 5, 16, 17, 63, 64, 65, 1000, 4099])
def test_three_pass_launches_compute_the_scan(blelloch, n, tile, exclusive):
    import numpy as np

    levels = blelloch.multipass_levels(n, tile)
    launches = blelloch.three_pass_launches(levels, tile, "int", 256, 4, exclusive, True, True, 4096)
    x = np.random.default_rng(n).integers(-64, 65, n).astype(np.int64)
    expected = np.cumsum(x) - (x if exclusive else 0)
    assert np.array_equal(emulate(launches, levels, x, tile), expected)
    tiles_scans = [launch for launch in launches if launch["kernel"] == "tiles"]
    assert len(tiles_scans) == (len(levels) if n else 0)
    # each level after the first scans its tiles' totals exclusively, from aligned buffers kbench allocates
    assert all(", true, true, true>" in launch["name"] for launch in tiles_scans[1:])


def test_three_pass_plan(blelloch):
    p = blelloch.plan(1 << 28, "int32", False, True, passes=3, prefetch=0)
    assert p["state_bytes"] == 0 and p["levels"] == [1 << 28, 32768, 4]
    names = [launch["name"] for launch in p["launches"]]
    assert names == ["scan_blelloch_tiles<int, 256, 32, false, true, true>",
                     "scan_blelloch_tiles<int, 256, 32, true, true, true>",
                     "scan_blelloch_tiles<int, 256, 32, true, true, true>",
                     "add_tile_prefix<int, 256, 32, true>", "add_tile_prefix<int, 256, 32, true>"]
    assert [launch["grid"] for launch in p["launches"]] == [(32768,), (4,), (1,), (3,), (32767,)]
    unaligned = blelloch.plan(70_001, "int64", True, False, passes=3, prefetch=0)
    first, *_, last = unaligned["launches"]
    assert first["name"] == "scan_blelloch_tiles<long long, 256, 16, true, false, false>" and first["smem"] == 0
    assert last["name"] == "add_tile_prefix<long long, 256, 16, false>" and last["output"] == "y"
    assert blelloch.plan(0, "int32", False, True, passes=3, prefetch=0)["launches"] == []
    assert [launch["kernel"] for launch in blelloch.plan(100, "fp32", True, True, passes=3, prefetch=0)["launches"]] \
        == ["tiles"]
    for kwargs in ({"prefetch": 1}, {"prefetch": 2}, {"prefetch": 0, "early": True}, {"prefetch": 0, "packed": False}):
        with pytest.raises(Unsupported, match="passes=3 joins the tiles without a look-back"):
            blelloch.plan(100, "int32", False, True, passes=3, **kwargs)


# --- explain ----------------------------------------------------------------------------------------------------

def test_explain_says_how_each_variant_joins_the_tiles(registry):
    impl = registry.implementations("scan")["blelloch"]
    case = scan_case(1 << 28)
    default = impl.explain(case, {**impl.params, "prefetch": 1})
    assert default["kernel"] == "scan_blelloch_pipelined<int, 256, 16, false, true, 1, false, true, 1, 128>"
    assert default["grid"].startswith("65,536 tiles of 4,096 elements (16,384 bytes) over persistent blocks")
    assert "next 1 tile in flight (cp.async into 2 shared-memory stages of 18,432 bytes)" in default["prefetch"]
    assert "one 8-byte status-and-value word a tile (128 bytes apart)" in default["decoupled look-back"]
    one_tile = impl.explain(case, {**impl.params, "prefetch": 0, "state": "split", "lookback": "early"})
    assert one_tile["grid"].startswith("32,768 tiles of 8,192 elements") and "prefetch" not in one_tile
    assert "warp 0, before the down-sweep" in one_tile["decoupled look-back"]
    assert "a status (release/acquire), an aggregate and a prefix a tile" in one_tile["decoupled look-back"]
    three = impl.explain(case, {**impl.params, "passes": 3})
    assert three["passes"].startswith("levels of 268,435,456, 32,768, 4 elements")
    assert "4,294,967,296 bytes, twice one pass's" in three["global traffic"]
    assert "not runnable" in impl.explain(case, {**impl.params, "prefetch": 1, "staged": 0})["configuration"]


# --- the benchmark plan -----------------------------------------------------------------------------------------

def test_the_h200_scan_plan_parses_and_names_what_is_loaded():
    from kbench import bench_plan, loader
    from kbench.cli import bench_cmd

    plan = bench_plan.read(loader.PROJECT_ROOT / "results" / "plans" / "h200-scan.toml")
    prepared = bench_cmd.prepare_plan(plan)
    assert {run.request.suite for run in prepared} == {"scan"}
    dtypes = {case.values["dtype"] for run in prepared for case in run.cases}
    assert dtypes == {"int32", "fp32", "int64"}
    assert all(case.values["n"] == 1 << 28 for run in prepared for case in run.cases)
    labels = {variant.label for run in prepared for variant in run.request.variants}
    assert {"torch-cumsum", "cupy-cumsum", "cub-scan", "blelloch", "blelloch[stride=0]", "blelloch[prefetch=1]",
            "blelloch[prefetch=1,stride=0]", "blelloch[passes=3]", "blelloch[items=16]"} <= labels


# --- cub-scan: the cuda-cccl API generations, with stand-ins ----------------------------------------------------

class NewScanner:
    """cuda.compute's scanner from 2026 on: the call takes the operator again, every argument by keyword."""

    def __init__(self):
        self.calls = []

    def __call__(self, *, temp_storage, d_in, d_out, op, init_value, num_items, stream=None):
        self.calls.append((temp_storage, op, num_items, stream))
        return 4096


class OldScanner:
    """cuda.compute's and cuda.cccl.parallel.experimental's earlier scanner: no operator in the call."""

    def __init__(self):
        self.calls = []

    def __call__(self, temp_storage, d_in, d_out, num_items, h_init, stream=None):
        self.calls.append((temp_storage, num_items, stream))
        return 512


def test_the_calling_convention_follows_the_scanner(cub):
    new, old = NewScanner(), OldScanner()
    assert cub.takes_op(new) is True and cub.takes_op(old) is False
    assert cub.make_call(new, "plus", True)(None, "x", "y", 10, "init", "stream") == 4096
    assert new.calls == [(None, "plus", 10, "stream")]
    assert cub.make_call(old, "plus", False)("temp", "x", "y", 7, "init", None) == 512
    assert old.calls == [("temp", 7, None)]
    found_out = cub.make_call(old, "plus", None)  # no signature to read: the first call finds out
    assert found_out(None, "x", "y", 3, "init", None) == 512 and found_out("t", "x", "y", 3, "init", None) == 512
    assert old.calls[-2:] == [(None, 3, None), ("t", 3, None)]


def test_the_scanner_is_built_by_keyword_or_in_order(cub):
    def keywords_only(*, d_in, d_out, op, init_value):
        return ("new", d_in, d_out, op, init_value)

    def in_order(d_in, d_out, op, h_init):
        return ("old", d_in, d_out, op, h_init)

    assert cub.build_scanner(keywords_only, "x", "y", "plus", 0) == ("new", "x", "y", "plus", 0)
    assert cub.build_scanner(in_order, "x", "y", "plus", 0) == ("old", "x", "y", "plus", 0)


def test_the_sum_operator_is_cubs_own_where_the_module_has_one(cub):
    with_kind = types.SimpleNamespace(OpKind=types.SimpleNamespace(PLUS="PLUS"))
    assert cub.sum_operator(with_kind) == "PLUS"
    add = cub.sum_operator(types.SimpleNamespace())  # the first releases: a Python function Numba compiles
    assert add(2, 3) == 5


def test_the_stream_is_handed_over_by_protocol(cub):
    assert cub.TorchStream(1234).__cuda_stream__() == (0, 1234)


def test_the_scan_module_is_the_newest_generation_installed(cub, monkeypatch):
    newest = types.ModuleType("cuda.compute")
    newest.make_inclusive_scan = newest.make_exclusive_scan = object()
    older = types.ModuleType("cuda.cccl.parallel.experimental")
    older.make_inclusive_scan = older.make_exclusive_scan = object()
    monkeypatch.setitem(sys.modules, "cuda.compute", newest)
    monkeypatch.setitem(sys.modules, "cuda.cccl.parallel.experimental", older)
    assert cub.scan_module() is newest
    monkeypatch.setitem(sys.modules, "cuda.compute", types.ModuleType("cuda.compute"))  # no CUDA bindings
    assert cub.scan_module() is older
    monkeypatch.setitem(sys.modules, "cuda.cccl.parallel.experimental", types.ModuleType("x"))
    with pytest.raises(Unsupported, match="neither cuda.compute nor cuda.cccl.parallel.experimental"):
        cub.scan_module()


def test_cub_scan_is_a_skip_that_names_its_module(registry, monkeypatch):
    import importlib.util

    impl = registry.implementations("scan")["cub-scan"]
    assert impl.needs.modules == ("torch", "cupy", "cuda.cccl") and impl.needs.cuda
    assert skip_reason(impl, scan_case(10), "cpu") == "needs a CUDA device"
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name != "cuda.cccl" else None)
    assert skip_reason(impl, scan_case(10), "cuda") == "needs cuda.cccl (not installed)"
    monkeypatch.setattr(importlib.util, "find_spec", real)
    assert "pip install cuda-cccl" in impl.description
