"""The matmul suite on the CPU: its cost model and precision-aware bound, its input
distributions, bad input, and the Triton kernel against float64 through Triton's interpreter
for shapes that are not multiples of any tile."""

import pytest

from kbench.correctness import PLAIN_FACTOR, check, expect
from kbench.errors import UserError
from kbench.suite import Case


def case(m, n, k, dtype="fp16", tf32=False):
    return Case({"m": m, "n": n, "k": k, "dtype": dtype, "tf32": tf32})


@pytest.fixture(scope="module")
def matmul(registry):
    return registry.suite("matmul")


def test_cost_model(matmul):
    c = case(1000, 777, 333, "bf16")
    assert matmul.flops(c) == 2 * 1000 * 777 * 333
    assert matmul.min_bytes(c) == 2 * (1000 * 333 + 333 * 777 + 1000 * 777)
    assert matmul.min_bytes(case(4, 4, 4, "fp32")) == 4 * 48


def _bound(matmul, c, seed=0, distribution="normal"):
    inputs = matmul.make_inputs(c, seed=seed, device="cpu", distribution=distribution)
    return expect(matmul, c, inputs, matmul.make_output(c, inputs)).bound


def test_the_bound_comes_from_the_plain_computation(matmul):
    """No fixed tolerance: atol and rtol are recorded as 0, and the bound is c x the error of the plain
    product in the case's type, so it grows with K and with the type's rounding, and --tf32 loosens it."""
    for dtype in ("fp16", "bf16", "fp32"):
        assert matmul.tolerance(case(8, 8, 8, dtype)) == (0.0, 0.0)
    small, large = _bound(matmul, case(32, 32, 16, "fp32")), _bound(matmul, case(32, 32, 4096, "fp32"))
    assert large.plain_err > small.plain_err > 0
    assert large.factor == small.factor == PLAIN_FACTOR["float32"]
    fp16 = _bound(matmul, case(32, 32, 256, "fp16"))
    assert fp16.factor == PLAIN_FACTOR["float16"]
    assert fp16.plain_err > 100 * _bound(matmul, case(32, 32, 256, "fp32")).plain_err
    # TF32 inputs keep 10 mantissa bits: with --tf32 the plain computation, and so the bound, is TF32's.
    tf32, fp32 = _bound(matmul, case(16, 16, 1024, "fp32", tf32=True)), _bound(matmul, case(16, 16, 1024, "fp32"))
    assert tf32.limit > 100 * fp32.limit


def test_input_distributions(matmul):
    c = case(24, 20, 64, "fp32")
    normal = matmul.make_inputs(c, seed=1, device="cpu", distribution="normal")
    assert normal["a"].equal(matmul.make_inputs(c, seed=1, device="cpu")["a"])  # normal is the default
    mixed = matmul.make_inputs(c, seed=1, device="cpu", distribution="mixed-magnitudes")
    row_scale = mixed["a"].abs().amax(dim=1)
    assert float(row_scale.max() / row_scale.min()) > 8  # rows of A at different powers of two
    cancel = matmul.make_inputs(c, seed=1, device="cpu", distribution="cancellation")
    a, b = cancel["a"], cancel["b"]
    assert a[:, :32].equal(a[:, 32:])
    product = (a.double() @ b.double()).abs().mean()
    terms = (a.double().abs() @ b.double().abs()).mean()
    assert product < terms / 20  # large terms that sum to a small result
    with pytest.raises(ValueError, match="distribution"):
        matmul.make_inputs(c, seed=1, device="cpu", distribution="no-such-thing")


def test_validate(matmul):
    for bad in (case(0, 4, 4), case(4, -1, 4), case(4, 4, 0)):
        with pytest.raises(UserError, match="must be positive"):
            matmul.validate(bad)
    with pytest.raises(UserError, match="--tf32 applies to fp32 only"):
        matmul.validate(case(8, 8, 8, "fp16", tf32=True))


def test_inputs_are_random_and_seeded(matmul):
    first = matmul.make_inputs(case(17, 9, 33), seed=3, device="cpu")
    again = matmul.make_inputs(case(17, 9, 33), seed=3, device="cpu")
    other = matmul.make_inputs(case(17, 9, 33), seed=4, device="cpu")
    assert first["a"].shape == (17, 33) and first["b"].shape == (33, 9)
    assert first["a"].equal(again["a"]) and not first["a"].equal(other["a"])
    assert first["a"].abs().sum() > 0  # never zeros


ODD_SHAPES = [(1, 1, 1), (17, 17, 17), (1, 65, 130), (100, 77, 33), (65, 1, 129)]


@pytest.mark.parametrize("dtype,tf32", [("fp16", False), ("bf16", False), ("fp32", False), ("fp32", True)])
@pytest.mark.parametrize("shape", ODD_SHAPES, ids=["x".join(map(str, s)) for s in ODD_SHAPES])
def test_triton_matches_float64(registry, matmul, shape, dtype, tf32):
    impl = registry.implementations("matmul")["triton"]
    verdict = check(matmul, impl, case(*shape, dtype, tf32), "cpu", seed=11, trials=2)
    assert verdict.ok, verdict.reason


# K and N multiples of 8 with edges in every dimension: the grouped kernel takes its 16-byte-rows form
# (ALIGN, sizes passed in units of 8 elements; 4 for fp32).
ALIGNED_SHAPES = [(1, 8, 8), (17, 24, 40), (100, 72, 200)]


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("shape", ALIGNED_SHAPES, ids=["x".join(map(str, s)) for s in ALIGNED_SHAPES])
def test_triton_aligned_rows_match_float64(registry, matmul, shape, dtype):
    impl = registry.implementations("matmul")["triton"]
    verdict = check(matmul, impl, case(*shape, dtype), "cpu", seed=13, trials=1)
    assert verdict.ok, verdict.reason
    assert verdict.last[0].config["align"] == (4 if dtype == "fp32" else 8)


def test_triton_row_alignment(registry):
    import sys

    import torch

    module = sys.modules[registry.implementations("matmul")["triton"].make.__module__]
    a, b, c = torch.empty(5, 16, dtype=torch.float16), torch.empty(16, 24, dtype=torch.float16), torch.empty(5, 24)
    assert module.row_alignment(a, b, c.half()) == 8
    assert module.row_alignment(a.float(), b.float(), c) == 4
    assert module.row_alignment(a[:, :12], b[:12], c.half()) == 1  # A's rows are 16 elements apart, K = 12
    assert module.row_alignment(torch.empty(5, 17, dtype=torch.float16)[:, 1:], b, c.half()) == 1  # rows off by 2 bytes
    assert module.row_alignment(a, torch.empty(16, 20, dtype=torch.float16), torch.empty(5, 20).half()) == 1  # N = 20


def test_triton_the_issue_shape_fp16(registry, matmul):
    """1000 x 777 x 333: no dimension is a multiple of a tile (one trial: ~3 s interpreted)."""
    impl = registry.implementations("matmul")["triton"]
    verdict = check(matmul, impl, case(1000, 777, 333, "fp16"), "cpu", seed=5, trials=1)
    assert verdict.ok, verdict.reason


# persistent=1 reads through TMA descriptors, which need K and N multiples of 8 (16-byte rows):
# shapes with edge tiles in every dimension, a single row, and more tiles than the interpreter's three
# programs (each takes several, unevenly).
PERSISTENT_SHAPES = [(1, 8, 8), (17, 24, 40), (100, 72, 48), (200, 136, 136)]


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", PERSISTENT_SHAPES, ids=["x".join(map(str, s)) for s in PERSISTENT_SHAPES])
def test_triton_persistent_matches_float64(registry, matmul, shape, dtype):
    impl = registry.implementations("matmul")["triton"]
    verdict = check(matmul, impl, case(*shape, dtype), "cpu", seed=7, trials=1, params={"persistent": 1})
    assert verdict.ok, verdict.reason


def test_triton_persistent_says_what_it_cannot_read(registry, matmul):
    from kbench.registry import Unsupported

    impl = registry.implementations("matmul")["triton"]
    with pytest.raises(Unsupported, match="fp32: persistent=1 is for fp16 and bf16"):
        check(matmul, impl, case(16, 16, 16, "fp32"), "cpu", seed=1, trials=1, params={"persistent": 1})
    with pytest.raises(Unsupported, match="16-byte aligned rows: B's row stride is 77 elements"):
        check(matmul, impl, case(16, 77, 16), "cpu", seed=1, trials=1, params={"persistent": 1})


@pytest.mark.parametrize("dtype,tf32", [("fp16", False), ("fp32", False)])
def test_cublas_peer_on_cpu(registry, matmul, dtype, tf32):
    impl = registry.implementations("matmul")["cublas"]
    verdict = check(matmul, impl, case(100, 77, 33, dtype, tf32), "cpu", seed=2, trials=2)
    assert verdict.ok, verdict.reason


def _sequential_fp32(case, inputs, out, tf32_inputs=False):
    """A reference-grade kernel: exact products, one fp32 rounding per step (an FMA chain over K)."""
    import torch

    from kbench.precision import round_to_tf32

    a, b = inputs["a"], inputs["b"]
    if tf32_inputs:  # keep 10 mantissa bits, as TF32 tensor cores read fp32 inputs
        a, b = round_to_tf32(a), round_to_tf32(b)
    a, b = a.double(), b.double()

    def run():
        acc = torch.zeros(case.m, case.n, dtype=torch.float32)
        for j in range(case.k):
            acc = (acc.double() + a[:, j:j + 1] * b[j:j + 1, :]).float()
        out.copy_(acc)

    return run


FP32_OVER_BOUND = (f"is over what a correct fp32 kernel makes ({PLAIN_FACTOR['float32']:g} x the plain fp32 "
                   "computation's")


def _fma_chain():
    from kbench.registry import Implementation, Needs

    return Implementation("matmul", "fma-chain", "torch", _sequential_fp32, Needs(), "", __file__)


def _tf32_chain():
    from kbench.registry import Implementation, Needs

    return Implementation("matmul", "tf32-inputs", "torch",
                          lambda case, inputs, out: _sequential_fp32(case, inputs, out, tf32_inputs=True),
                          Needs(), "", __file__)


def test_sequential_fp32_accumulation_passes_and_tf32_fails(matmul):
    """The bound admits a correct FMA chain over K = 4096 (the order of summation differs from the plain
    product's) on every input distribution, and refuses the same chain on TF32-rounded inputs."""
    c = case(32, 64, 4096, "fp32")
    verdict = check(matmul, _fma_chain(), c, "cpu", seed=0, trials=1)
    assert verdict.ok, verdict.reason
    assert list(verdict.distributions) == list(matmul.distributions)
    for name, entry in verdict.distributions.items():
        assert entry["max_abs_err"] <= entry["allowed"], (name, entry)

    verdict = check(matmul, _tf32_chain(), c, "cpu", seed=0, trials=1)
    assert not verdict.ok
    assert verdict.reason.startswith("trial 1 (seed 0, normal inputs): ")
    assert FP32_OVER_BOUND in verdict.reason


def test_a_tf32_product_passes_with_tf32(matmul):
    """With --tf32 the plain computation is on TF32-rounded inputs too: the same kernel is right."""
    c = case(24, 40, 512, "fp32", tf32=True)
    verdict = check(matmul, _tf32_chain(), c, "cpu", seed=3, trials=1)
    assert verdict.ok, verdict.reason
    assert list(verdict.distributions) == list(matmul.distributions)
    assert not check(matmul, _tf32_chain(), case(24, 40, 512, "fp32"), "cpu", seed=3, trials=1).ok


def test_an_fp16_accumulator_fails_the_tolerance(registry, matmul):
    """A kernel that accumulates in fp16 (a classic bug) must not pass at large K."""
    import torch

    from kbench.registry import Implementation, Needs

    def make(case, inputs, out):
        a, b = inputs["a"], inputs["b"]

        def run():
            acc = torch.zeros(case.m, case.n, dtype=torch.float16)
            for j in range(case.k):
                acc += (a[:, j:j + 1].float() * b[j:j + 1, :].float()).half()
            out.copy_(acc)

        return run

    bad = Implementation("matmul", "fp16-acc", "torch", make, Needs(), "", __file__)
    verdict = check(matmul, bad, case(8, 8, 2048, "fp16"), "cpu", seed=0, trials=1)
    assert not verdict.ok
    assert f"is over what a correct fp16 kernel makes ({PLAIN_FACTOR['float16']:g} x the plain fp16 computation's" \
        in verdict.reason


@pytest.mark.parametrize("args,fragment", [
    (["--dtype", "fp16", "--tf32"], "--tf32 applies to fp32 only"),
    (["--m", "0"], "--m must be positive"),
    (["--k", "x"], "--k: 'x' is not an integer"),
    (["--dtype", "int8"], "--dtype: unknown value 'int8'"),
])
def test_bad_matmul_input_is_one_line_and_exit_2(cli, args, fragment, tmp_path):
    result = cli("run", "matmul", *args, "--out", tmp_path / "x.jsonl")
    assert result.exit_code == 2
    assert fragment in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x.jsonl").exists()
