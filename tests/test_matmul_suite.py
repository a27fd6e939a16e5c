"""The matmul suite on the CPU: its cost model and tolerance, bad input, and the
Triton kernel against float64 through Triton's interpreter for shapes that are
not multiples of any tile."""

import pytest

from kbench.correctness import check
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


def test_tolerance_grows_with_k(matmul):
    small, large = matmul.tolerance(case(64, 64, 16)), matmul.tolerance(case(64, 64, 4096))
    assert large[0] > small[0] and large[1] == small[1]  # atol scales with K, rtol is the output type's
    atol, rtol = matmul.tolerance(case(64, 64, 256, "fp16"))
    assert atol == pytest.approx(4 * 2**-11 * 16 + 6 * 2**-24 * 256)
    assert rtol == 4 * 2**-11
    # TF32 inputs lose 13 mantissa bits: its tolerance is far above exact fp32's.
    assert matmul.tolerance(case(8, 8, 1024, "fp32", tf32=True))[0] > 100 * matmul.tolerance(case(8, 8, 1024, "fp32"))[0]


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


def test_triton_the_issue_shape_fp16(registry, matmul):
    """1000 x 777 x 333: no dimension is a multiple of a tile (one trial: ~3 s interpreted)."""
    impl = registry.implementations("matmul")["triton"]
    verdict = check(matmul, impl, case(1000, 777, 333, "fp16"), "cpu", seed=5, trials=1)
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize("dtype,tf32", [("fp16", False), ("fp32", False)])
def test_cublas_peer_on_cpu(registry, matmul, dtype, tf32):
    impl = registry.implementations("matmul")["cublas"]
    verdict = check(matmul, impl, case(100, 77, 33, dtype, tf32), "cpu", seed=2, trials=2)
    assert verdict.ok, verdict.reason


def _sequential_fp32(case, inputs, out, tf32_inputs=False):
    """A reference-grade kernel: exact products, one fp32 rounding per step (an FMA chain over K)."""
    import torch

    a, b = inputs["a"].double(), inputs["b"].double()
    if tf32_inputs:  # keep 10 mantissa bits, as TF32 tensor cores read fp32 inputs
        a, b = (x.float().view(torch.int32).bitwise_and(~0x1FFF).view(torch.float32).double() for x in (a, b))

    def run():
        acc = torch.zeros(case.m, case.n, dtype=torch.float32)
        for j in range(case.k):
            acc = (acc.double() + a[:, j:j + 1] * b[j:j + 1, :]).float()
        out.copy_(acc)

    return run


def test_sequential_fp32_accumulation_passes_and_tf32_fails(matmul):
    """The fp32 tolerance admits a correct FMA chain over K = 4096 (the case cuBLAS once failed
    on the H200 under the old 4 u32·K bound) and still refuses TF32-rounded inputs."""
    from kbench.registry import Implementation, Needs

    c = case(32, 64, 4096, "fp32")
    fp32 = Implementation("matmul", "fma-chain", "torch", _sequential_fp32, Needs(), "", __file__)
    verdict = check(matmul, fp32, c, "cpu", seed=0, trials=1)
    assert verdict.ok, verdict.reason
    assert verdict.max_abs_err < verdict.atol / 2  # the bound is a tail bound, not the typical error

    tf32 = Implementation("matmul", "tf32-inputs", "torch",
                          lambda case, inputs, out: _sequential_fp32(case, inputs, out, tf32_inputs=True),
                          Needs(), "", __file__)
    verdict = check(matmul, tf32, c, "cpu", seed=0, trials=1)
    assert not verdict.ok and "outside atol" in verdict.reason


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
    assert not verdict.ok and "outside atol" in verdict.reason


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
