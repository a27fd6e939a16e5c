"""The reduction and scan suites on the CPU: exactly summable inputs, tolerances that
catch a dropped element or a half-precision accumulator, the peers against float64,
the CUDA kernels' launch geometry, and bad input."""

import pytest

from kbench.correctness import check
from kbench.registry import Implementation, Needs, Unsupported
from kbench.suite import Case


def red(n, dtype="fp32"):
    return Case({"n": n, "dtype": dtype})


def scan_case(n, dtype="int32", exclusive=False):
    return Case({"n": n, "dtype": dtype, "exclusive": exclusive})


@pytest.fixture(scope="module")
def reduction(registry):
    return registry.suite("reduction")


@pytest.fixture(scope="module")
def scan(registry):
    return registry.suite("scan")


def fake(suite, name, make):
    return Implementation(suite, name, "torch", make, Needs(), "", __file__)


def test_float_inputs_are_exactly_summable_in_fp32(reduction):
    """Sequential fp32 accumulation of a million inputs equals the float64 sum exactly."""
    import torch

    for dtype in ("fp32", "fp16"):
        x = reduction.make_inputs(red(1_000_000, dtype), seed=3, device="cpu")["x"]
        assert x.abs().max() <= 1 and bool((x.float() * 64 == (x.float() * 64).round()).all())
        sequential = torch.cumsum(x.float(), 0)[-1]  # one rounding per step, in order
        assert float(sequential) == float(reduction.reference(red(1_000_000, dtype), {"x": x}))
        assert x.std() > 0.3  # random, not zeros


@pytest.mark.parametrize("distribution", ["uniform", "runs", "cancellation"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_every_distribution_is_exactly_summable_in_fp32(reduction, dtype, distribution):
    """Whatever the distribution, sequential fp32 accumulation is exact."""
    import torch

    assert distribution in reduction.distributions
    case = red(300_000, dtype)
    x = reduction.make_inputs(case, seed=5, device="cpu", distribution=distribution)["x"]
    assert bool((x.float() * 64 == (x.float() * 64).round()).all())
    assert torch.cumsum(x.double(), 0).abs().max() < 2**18  # every partial sum holds k / 64 exactly in fp32
    assert float(torch.cumsum(x.float(), 0)[-1]) == float(reduction.reference(case, {"x": x}))
    again = reduction.make_inputs(case, seed=5, device="cpu", distribution=distribution)["x"]
    assert torch.equal(x, again) and bool((x != 0).float().mean() > 0.6)  # mostly nonzero


@pytest.mark.parametrize("distribution", ["uniform", "runs", "cancellation"])
def test_block_sums_added_in_any_order_stay_exact_in_fp32(reduction, distribution):
    """A grid-stride kernel's blocks (1056 blocks of 256 threads, 4 elements a load: the warp-shuffle
    kernel on an H200) each sum their share, then add it to the output with an atomic, in an order no
    one controls. Every running total must stay under 2^18 so that fp32 holds it exactly; this asks for a
    margin of 4 (2^16). Runs of one sign that are long and large (|k| up to 64, runs up to 2^16) reach
    about 1.7e5 at n = 2^26 (and 5e5 at 2^28, where a correct kernel then rounds a quarter of the time)."""
    import torch

    n, threads, vector = 1 << 26, 1056 * 256, 4
    x = reduction.make_inputs(red(n, "fp32"), seed=1, device="cpu", distribution=distribution)["x"].double()
    block = (torch.arange(n // vector) % threads) // 256
    sums = torch.zeros(1056, dtype=torch.float64).index_add_(0, block, x.view(-1, vector).sum(1))
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        order = sums[torch.randperm(len(sums), generator=generator)]
        assert torch.cumsum(order, 0).abs().max() < 2**16


def test_distributions_have_their_shapes(reduction, scan):
    """runs: long stretches of one sign; cancellation: pairs of large values that nearly cancel."""
    import torch

    from kbench.loader import BUILTIN_SUITES, load_helper

    exact_sums = load_helper(BUILTIN_SUITES / "_common" / "exact_sums.py")
    INT_RANGE, RUN_MIN = exact_sums.INT_RANGE, exact_sums.RUN_MIN

    assert reduction.distributions == scan.distributions == ("uniform", "runs", "cancellation")
    runs = reduction.make_inputs(red(200_000, "fp32"), seed=1, device="cpu", distribution="runs")["x"]
    signs = torch.sign(runs[runs != 0])
    changes = int((signs[1:] != signs[:-1]).sum())
    assert 0 < changes <= 200_000 // RUN_MIN + 1
    uniform = reduction.make_inputs(red(200_000, "fp32"), seed=1, device="cpu", distribution="uniform")["x"]
    assert int((torch.sign(uniform[uniform != 0])[1:] != torch.sign(uniform[uniform != 0])[:-1]).sum()) > 50_000

    pairs = reduction.make_inputs(red(100_000, "fp32"), seed=1, device="cpu", distribution="cancellation")["x"]
    assert pairs.abs().max() > 10  # large terms...
    assert (pairs[0::2] + pairs[1::2]).abs().max() <= 1  # ...that cancel in pairs
    ints = reduction.make_inputs(red(1000, "int32"), seed=1, device="cpu", distribution="cancellation")["x"]
    assert ints.abs().max() > 10 * INT_RANGE and (ints[0::2].long() + ints[1::2].long()).abs().max() <= INT_RANGE
    with pytest.raises(ValueError, match="distribution"):
        reduction.make_inputs(red(10), seed=1, device="cpu", distribution="no-such-thing")


def test_runs_catch_a_narrow_accumulator_that_uniform_inputs_miss(reduction):
    """Over 256 uniform inputs the partial sums stay small enough for an fp16 accumulator to be exact;
    a run of one sign takes them where it rounds. The failure names the distribution that showed it."""
    import torch

    def fp16_accumulator(case, inputs, out):
        return lambda: out.copy_(torch.cumsum(inputs["x"].half(), 0)[-1].float())

    verdict = check(reduction, fake("reduction", "fp16-acc", fp16_accumulator), red(256, "fp16"), "cpu",
                    seed=0, trials=3)
    assert not verdict.ok
    assert verdict.reason.startswith("trial 2 (seed 1, runs inputs): ") and "outside atol" in verdict.reason
    assert verdict.distributions["uniform"] == {"max_abs_err": 0.0}  # right on the uniform trial
    assert verdict.distributions["runs"]["max_abs_err"] > reduction.tolerance(red(256, "fp16"))[0]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "int32"])
def test_torch_sum_passes_on_the_cpu(registry, reduction, dtype):
    impl = registry.implementations("reduction")["torch-sum"]
    for n in (0, 1, 31, 4099):
        verdict = check(reduction, impl, red(n, dtype), "cpu", seed=1, trials=2)
        assert verdict.ok, (n, verdict.reason)


def test_reduction_catches_a_dropped_element_and_an_fp16_accumulator(reduction):
    import torch

    def dropped(case, inputs, out):
        return lambda: out.copy_(inputs["x"][1:].to(out.dtype).sum())

    def fp16_accumulator(case, inputs, out):
        return lambda: out.copy_(torch.cumsum(inputs["x"].half(), 0)[-1].float())

    for make in (dropped, fp16_accumulator):
        verdict = check(reduction, fake("reduction", make.__name__, make), red(20_000, "fp16"), "cpu", seed=0, trials=3)
        assert not verdict.ok and "outside atol" in verdict.reason, make.__name__


def test_reduction_output_types_and_cost(reduction):
    x = reduction.make_inputs(red(10, "fp16"), seed=0, device="cpu")
    assert str(reduction.make_output(red(10, "fp16"), x).dtype) == "torch.float32"
    x = reduction.make_inputs(red(10, "int32"), seed=0, device="cpu")
    assert str(reduction.make_output(red(10, "int32"), x).dtype) == "torch.int32"
    assert reduction.min_bytes(red(1 << 28, "fp32")) == 4 * 2**28 + 4
    assert reduction.tolerance(red(5, "int32")) == (0.0, 0.0)


def test_warp_shuffle_launch_geometry(registry):
    import sys

    module = sys.modules[registry.implementations("reduction")["warp-shuffle"].make.__module__]
    big = module.plan(1 << 28, "fp32", sm_count=132, blocks_per_sm=8, aligned=True)
    assert big["grid"] == (132 * 8,) and big["name"] == "reduce_sum<float, float, true, 4>"
    small = module.plan(1000, "fp16", sm_count=132, blocks_per_sm=8, aligned=True)
    assert small["grid"] == (1,)  # 8 halves a load: 125 loads fill one block
    assert module.plan(0, "int32", 132, 8, aligned=False)["name"] == "reduce_sum<int, int, false, 4>"
    with pytest.raises(Unsupported, match="bf16"):
        module.plan(10, "bf16", 132, 8, True)


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("dtype", ["int32", "int64", "fp32"])
def test_torch_cumsum_passes_on_the_cpu(registry, scan, dtype, exclusive):
    impl = registry.implementations("scan")["torch-cumsum"]
    for n in (0, 1, 2, 31, 4099):
        verdict = check(scan, impl, scan_case(n, dtype, exclusive), "cpu", seed=1, trials=2)
        assert verdict.ok, (n, verdict.reason)


def test_scan_reference_and_tolerance(scan):
    import torch

    x = torch.tensor([3, -1, 4], dtype=torch.int32)
    assert scan.reference(scan_case(3), {"x": x}).tolist() == [3, 2, 6]
    assert scan.reference(scan_case(3, exclusive=True), {"x": x}).tolist() == [0, 3, 2]
    assert scan.tolerance(scan_case(10**6, "int64")) == (0.0, 0.0)
    small, big = scan.tolerance(scan_case(100, "fp32")), scan.tolerance(scan_case(1 << 28, "fp32"))
    assert small[0] < big[0] <= 1 / 256  # grows with n, below a quarter of the input step


def test_scan_catches_an_off_by_one_and_an_inclusive_answer_to_exclusive(scan):
    import torch

    def shifted(case, inputs, out):  # each prefix one element short: exclusive where inclusive is asked
        def run():
            out.zero_()
            out[1:] = torch.cumsum(inputs["x"], 0)[:-1]
        return run

    verdict = check(scan, fake("scan", "shifted", shifted), scan_case(5000), "cpu", seed=0, trials=2)
    assert not verdict.ok and "outside atol" in verdict.reason
    inclusive = lambda case, inputs, out: (lambda: torch.cumsum(inputs["x"], 0, out=out))  # noqa: E731
    verdict = check(scan, fake("scan", "inclusive", inclusive), scan_case(5000, exclusive=True), "cpu", 0, 2)
    assert not verdict.ok


def test_blelloch_launch_geometry(registry):
    """One tile a block (prefetch=0); the pipelined default and the three passes: test_scan_kernels.py."""
    import sys

    module = sys.modules[registry.implementations("scan")["blelloch"].make.__module__]
    p = module.plan(1 << 28, "int32", exclusive=False, aligned=True, prefetch=0, items=16, packed=False)
    # split state: 65,536 statuses (4 bytes), aggregates and prefixes (4 bytes each) after the 16-byte counter
    assert p["tile"] == 4096 and p["grid"] == (65536,) and p["state_bytes"] == 16 + 65536 * 12
    p = module.plan(4097, "int64", exclusive=True, aligned=False, prefetch=0, packed=False)
    assert p["tile"] == 4096 and p["grid"] == (2,)
    assert p["name"] == "scan_blelloch<long long, 256, 16, true, false, false, false, false>"
    assert p["state_bytes"] == 16 + 16 + 2 * 2 * 8  # two statuses padded to 16 bytes, then 2 x 2 values
    # staged copies are 16-byte ones: asked for on an unaligned tensor, the plain path is launched
    assert module.plan(4097, "int32", False, aligned=False, prefetch=0, staged=True)["name"].endswith(
        "false, false, false, false, true, 1, 128>")
    assert module.plan(4097, "int32", False, aligned=True, prefetch=0, staged=True)["name"] == \
        "scan_blelloch<int, 256, 32, false, true, true, false, true, 1, 128>"  # packed state a line a tile by default
    assert module.plan(0, "fp32", False, True, prefetch=0)["grid"] == (0,)
    p = module.plan(1 << 28, "int32", False, aligned=True, prefetch=0, staged=True, items=32)
    assert p["tile"] == 8192 and p["grid"] == (32768,)
    assert module.plan(100, "int64", False, True, prefetch=0, items=4)["tile"] == 1024
    assert module.plan(100, "int32", False, True, prefetch=0, early=True, packed=False)["name"].endswith(
        "true, true, true, false>")
    # packed: one word a tile, twice the element size, a 128-byte line apart by default; 128 threads halve the tile
    p = module.plan(1 << 28, "int32", False, True, prefetch=0, threads=128)
    assert p["name"] == "scan_blelloch<int, 128, 32, false, true, true, false, true, 1, 128>"
    assert p["tile"] == 4096 and p["state_bytes"] == 16 + 65536 * 128
    assert module.plan(1 << 28, "int32", False, True, prefetch=0, threads=128, stride=0)["state_bytes"] == 16 + 65536 * 8
    assert module.plan(5000, "int64", False, True, prefetch=0, items=8, packed=True, stride=0)["state_bytes"] == 16 + 3 * 16
    assert module.plan(5000, "int64", False, True, prefetch=0, items=8, packed=True, stride=32)["state_bytes"] == 16 + 3 * 32
    for dtype, items in (("int32", 2), ("int32", 64), ("int64", 3)):
        with pytest.raises(Unsupported, match="items="):
            module.plan(100, dtype, False, True, items=items)
    with pytest.raises(Unsupported, match="threads=512"):
        module.plan(100, "int32", False, True, threads=512)
    with pytest.raises(Unsupported, match="fp16"):
        module.plan(10, "fp16", False, True)


@pytest.mark.parametrize("args,fragment", [
    (["reduction", "--n", "-1"], "--n must be 0 or more"),
    (["reduction", "--dtype", "bf16"], "--dtype: unknown value 'bf16'"),
    (["scan", "--n", str(1 << 31)], "--n must be below 2^31"),
    (["scan", "--dtype", "fp16"], "--dtype: unknown value 'fp16'"),
])
def test_bad_input_is_one_line_and_exit_2(cli, args, fragment, tmp_path):
    result = cli("run", *args, "--out", tmp_path / "x.jsonl")
    assert result.exit_code == 2
    assert fragment in result.output
