"""The decode suite (suites/decode/): its float64 reference against the textbook formula, its case
checks, its input distributions, and its implementations on the CPU (the torch peer, and the Triton
flash-decoding kernel through Triton's interpreter) through kbench's own correctness check, at cache
lengths that leave partial tiles and pieces, with GQA, MQA and several new queries."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from kbench.correctness import check
from kbench.errors import UserError
from kbench.suite import Case


def case(l=17, q=1, batch=1, hq=8, hkv=2, d=16, kv_dtype="fp16", group=32) -> Case:
    return Case({"l": l, "q": q, "batch": batch, "hq": hq, "hkv": hkv, "d": d, "kv_dtype": kv_dtype,
                 "group": group})


@pytest.fixture(scope="module")
def decode(registry):
    return registry.suite("decode")


@pytest.fixture(scope="module")
def splitkv(registry):
    """The triton-splitkv kernel file's module (its split plan and tile constants)."""
    return sys.modules[registry.implementations("decode")["triton-splitkv"].make.__module__]


def _textbook(q, k, v):
    """softmax(Q Kᵀ/√d) V in float64 with K/V heads repeated for their query heads and the new queries
    at the cache's last positions."""
    import torch

    group = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    nq, n = q.shape[2], k.shape[2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    visible = torch.arange(n).unsqueeze(0) <= torch.arange(n - nq, n).unsqueeze(-1)
    return torch.softmax(s.masked_fill(~visible, float("-inf")), dim=-1) @ v


@pytest.mark.parametrize("c", [case(), case(l=40, q=5, hq=6, hkv=3, d=8), case(l=9, hq=4, hkv=1, batch=2)],
                         ids=lambda c: c.key)
def test_reference_is_the_textbook_formula(decode, c):
    import torch

    inputs = decode.make_inputs(c, seed=3, device="cpu", distribution="outliers")
    q, k, v = (inputs[x].double() for x in "qkv")
    assert torch.allclose(decode.reference(c, inputs), _textbook(q, k, v), rtol=1e-12, atol=1e-12)


def test_a_ragged_batch_is_each_sequence_on_its_own_tokens(decode):
    """--l 40+9+23: three sequences, each attending to its own first tokens of a cache as long as the longest
    (the tokens past a sequence's length are drawn like the others, so a kernel that reads them is wrong);
    FLOPs and bytes count each sequence's own tokens."""
    import torch

    c = case(l="40+9+23", q=3, batch=3, hq=6, hkv=3, d=8, kv_dtype="fp16")
    inputs = decode.make_inputs(c, seed=5, device="cpu", distribution="normal")
    assert inputs["k"].shape[2] == 40 and inputs["lengths"].tolist() == [40, 9, 23]
    q, k, v = (inputs[x].double() for x in "qkv")
    expected = torch.cat([_textbook(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n]) for b, n in enumerate((40, 9, 23))])
    assert torch.allclose(decode.reference(c, inputs), expected, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(decode.reference(c, inputs), _textbook(q, k, v))  # the padding would change it
    assert decode.flops(c) == 4.0 * 6 * 3 * (40 + 9 + 23) * 8
    assert decode.cache_bytes(c) == 2.0 * 2 * 3 * (40 + 9 + 23) * 8
    int4 = case(l="40+9", batch=2, hkv=1, d=8, kv_dtype="int4", group=16)
    assert decode.cache_bytes(int4) == 2 * (40 + 9) * 8 / 2 + 4 * ((3 + 1) * 8 + (40 + 9) * 1)


def test_ragged_lengths_on_the_command_line(decode):
    """A + joins a ragged batch's lengths (--batch becomes their count); a comma still sweeps; one length is a
    number as before."""
    from kbench.cli.suite_options import make_cases

    raw = {"l": "1000+130000,4096", "q": "1", "batch": "1", "hq": "8", "hkv": "2", "d": "16", "kv_dtype": "fp16",
           "group": "32"}
    assert [(c.l, c.batch) for c in make_cases(decode, raw)] == [("1000+130000", 2), (4096, 1)]
    assert [(c.l, c.batch) for c in make_cases(decode, {**raw, "l": "7+5", "batch": "2"})] == [("7+5", 2)]
    for l, batch, message in (("7+5", "3", "leave --batch at 1 or give 2"), ("7+x", "1", "is not a length"),
                              ("7+0", "1", "--l must be positive"), ("7+2", "1", None)):
        if message is None:
            with pytest.raises(UserError, match=r"--q 3 is more than --l 2 \(the shortest sequence of 7\+2\)"):
                make_cases(decode, {**raw, "l": l, "q": "3"})
            continue
        with pytest.raises(UserError, match=message):
            make_cases(decode, {**raw, "l": l, "batch": batch})


@pytest.mark.parametrize("values, message", [
    ({"hq": 8, "hkv": 3}, "--hq 8 is not a multiple of --hkv 3"),
    ({"l": 2, "q": 3}, "--q 3 is more than --l 2"),
    ({"d": 12}, "--d 12 is not supported"),
    ({"l": 0}, "--l must be positive"),
])
def test_cases_no_kernel_could_run_are_refused(decode, values, message):
    with pytest.raises(UserError, match=message):
        decode.validate(case(**values))


def test_a_group_sweep_runs_a_16_bit_cache_once(decode):
    """--group applies to quantized caches only: swept, it makes one fp16 case (at the default group),
    and a group no cache could have is refused even where it does not apply."""
    from kbench.cli.suite_options import make_cases

    raw = {"l": "17", "q": "1", "batch": "1", "hq": "8", "hkv": "2", "d": "16", "kv_dtype": "fp16,int4", "group": "32,128"}
    assert [(c.kv_dtype, c.group) for c in make_cases(decode, raw)] == [("fp16", 32), ("int4", 32), ("int4", 128)]
    assert [c.group for c in make_cases(decode, {**raw, "kv_dtype": "bf16", "group": "128"})] == [32]
    with pytest.raises(UserError, match="--group must be positive"):
        make_cases(decode, {**raw, "kv_dtype": "fp16", "group": "0"})


def test_the_growing_distribution_makes_the_newest_keys_matter(decode, splitkv):
    """Under `growing` the last K/V tile carries most of each row's weight: a kernel that drops it (or
    misweights its piece in the combine) is far outside any bound."""
    import torch

    c = case(l=300, d=64)
    inputs = {name: t.double() for name, t in decode.make_inputs(c, seed=1, device="cpu", distribution="growing").items()}
    full = decode.reference(c, inputs)
    cut = {**inputs, "k": inputs["k"][:, :, :-splitkv.BLOCK_N], "v": inputs["v"][:, :, :-splitkv.BLOCK_N]}
    dropped = decode.reference(case(l=300 - splitkv.BLOCK_N, d=64), cut)
    assert (full - dropped).abs().max() > 0.5
    assert torch.isfinite(full).all()


# (case, splits): partial tiles and pieces; GQA, MQA and MHA; several new queries; a group of more rows
# than one tile (32 heads x 3 queries: two row blocks); bf16; batch > 1.
CHECKS = [
    (case(l=1, hq=4, hkv=2), "auto"),
    (case(l=17, q=3, d=64), "auto"),
    (case(l=1000, hq=8, hkv=8, d=32, kv_dtype="bf16"), "3"),
    (case(l=200, q=3, hq=32, hkv=1), "2"),
    (case(l=130, q=2, hq=4, hkv=1, batch=2, d=64), "5"),
    # int8 caches: groups that divide neither the tokens nor the channels, several pieces, a short cache
    (case(l=100, q=3, d=64, kv_dtype="int8", group=48), "2"),
    (case(l=1000, hq=4, hkv=1, d=32, kv_dtype="int8", group=32), "auto"),
    (case(l=5, hq=4, hkv=2, d=16, kv_dtype="int8", group=4), "auto"),
    # int4 caches (two codes a byte): a group that splits channel pairs, several pieces, two row blocks
    (case(l=100, q=3, d=64, kv_dtype="int4", group=7), "2"),
    (case(l=300, q=2, hq=32, hkv=1, d=32, kv_dtype="int4", group=32), "auto"),
    (case(l=1000, hq=4, hkv=2, d=32, kv_dtype="int4", group=32), "16"),  # 16 tiles, a piece each
    # int2 caches (four codes a byte): a group that ends inside a byte's codes, several pieces, two row blocks
    (case(l=100, q=3, d=64, kv_dtype="int2", group=7), "2"),
    (case(l=300, q=2, hq=32, hkv=1, d=32, kv_dtype="int2", group=32), "auto"),
    # groups of tokens longer than a K/V tile (64 keys): one K scale a tile, the last group partial, pieces
    # that start inside a group; V's groups a token's whole row of channels
    (case(l=300, q=2, hq=8, hkv=2, d=128, kv_dtype="int4", group=128), "2"),
    (case(l=200, hq=4, hkv=1, d=64, kv_dtype="int8", group=64), "auto"),
    (case(l=150, hq=4, hkv=2, d=128, kv_dtype="int2", group=128), "3"),
    # more pieces than the merge loads at once (MAX_COMBINE_PIECES): two rounds, the last piece 17 keys
    (case(l=4497, hq=4, hkv=1, d=16), "71"),  # 71 tiles of 64 keys: a piece each
    # ragged batches: a sequence of one token beside a long one (its later pieces read nothing), several new
    # queries at each sequence's own end, a quantized cache whose groups of tokens cross a sequence's end
    (case(l="1+300", batch=2, hq=4, hkv=2, d=32), "auto"),
    (case(l="200+17+90", q=3, batch=3, hq=8, hkv=2, d=16), "4"),
    (case(l="100+37", q=2, batch=2, hq=4, hkv=1, d=32, kv_dtype="int4", group=32), "3"),
]


@pytest.mark.parametrize("impl", ["triton-splitkv", "sdpa"])
@pytest.mark.parametrize("c, splits", CHECKS, ids=[f"{c.key}-splits={s}" for c, s in CHECKS])
def test_implementations_pass_the_check_on_the_cpu(registry, decode, impl, c, splits):
    implementation = registry.implementations("decode")[impl]
    params = {"splits": splits} if impl == "triton-splitkv" else {}
    verdict = check(decode, implementation, c, "cpu", seed=7, trials=len(decode.distributions), params=params)
    assert verdict.ok, verdict.reason
    assert set(verdict.as_record()["distributions"]) == set(decode.distributions)


# K and V read through tensor descriptors (loads=tma, the default form on sm_90 but for int4 caches): a
# partial last tile (zeros past the cache), several pieces and row blocks, every cache type, MQA, d 16-128.
TMA_CHECKS = [
    (case(l=1000, q=3, d=128), "auto"),
    (case(l=17, q=2, hq=32, hkv=1, d=64, kv_dtype="bf16"), "auto"),
    (case(l=300, q=3, hq=48, hkv=2, d=32, kv_dtype="int8", group=16), "3"),
    (case(l=4099, hq=4, hkv=2, d=64, kv_dtype="int4", group=32), "auto"),
    (case(l=1000, hq=4, hkv=2, d=64, kv_dtype="int2", group=32), "2"),
    (case(l=1, d=16), "auto"),
    (case(l=1, batch=2, d=128, kv_dtype="int8"), "auto"),  # a dimension of size 1, its stride arbitrary
]


@pytest.mark.parametrize("c, splits", TMA_CHECKS, ids=[f"{c.key}-splits={s}" for c, s in TMA_CHECKS])
def test_triton_splitkv_through_tensor_descriptors_passes_the_check_on_the_cpu(registry, decode, c, splits):
    implementation = registry.implementations("decode")["triton-splitkv"]
    verdict = check(decode, implementation, c, "cpu", seed=5, trials=len(decode.distributions),
                    params={"splits": splits, "loads": "tma"})
    assert verdict.ok, verdict.reason


def test_tensor_descriptors_refuse_rows_of_less_than_16_bytes(registry, decode, splitkv):
    """The TMA reads whole 16-byte units: an int4 cache of d = 16 (8 bytes a token) is a SKIP that says so."""
    import torch

    from kbench.registry import Unsupported

    c = case(l=64, d=16, kv_dtype="int4", group=16)
    inputs = decode.make_inputs(c, seed=1, device="cpu")
    with pytest.raises(Unsupported, match="loads=tma needs 16-byte aligned K/V rows and strides .a row here is 8 bytes"):
        registry.implementations("decode")["triton-splitkv"].make(c, inputs, torch.empty_like(inputs["q"]), loads="tma")


def test_pdl_is_a_skip_that_says_why_without_a_hopper_gpu(registry, decode):
    """pdl=1 launches the merge through griddepcontrol, which Triton's CPU interpreter cannot run."""
    import torch

    from kbench.registry import Unsupported

    c = case(l=100)
    inputs = decode.make_inputs(c, seed=1, device="cpu")
    with pytest.raises(Unsupported, match="pdl=1: programmatic dependent launch needs sm_90"):
        registry.implementations("decode")["triton-splitkv"].make(c, inputs, torch.empty_like(inputs["q"]), pdl=1)


def test_pdl_auto_launches_the_merge_as_a_dependent_from_sm90_on(splitkv):
    assert splitkv.resolve_pdl("auto", (9, 0)) and splitkv.resolve_pdl("auto", (10, 0))
    assert not splitkv.resolve_pdl("auto", (8, 0)) and not splitkv.resolve_pdl("auto", None)
    assert splitkv.resolve_pdl("1", (9, 0)) and splitkv.resolve_pdl(1, (9, 0))
    assert not splitkv.resolve_pdl("0", (9, 0)) and not splitkv.resolve_pdl(0, (10, 0))


def test_loads_auto_takes_tma_on_hopper_but_for_int4_and_pointers_elsewhere(splitkv):
    assert splitkv.resolve_loads("auto", 0, (9, 0)) == "tma" and splitkv.resolve_loads("auto", 8, (10, 0)) == "tma"
    assert splitkv.resolve_loads("auto", 4, (9, 0)) == "pointers"
    assert splitkv.resolve_loads("auto", 0, (8, 0)) == "pointers" and splitkv.resolve_loads("auto", 0, None) == "pointers"
    assert splitkv.resolve_loads("tma", 4, None) == "tma"
    assert splitkv.resolve_loads("auto", 0, (9, 0), readable=False) == "pointers"  # what the TMA cannot read


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("along, groups_shape", [(-2, (1, 2, 5, 24)), (-1, (1, 2, 70, 2))], ids=["tokens", "channels"])
def test_a_quantized_cache_holds_each_value_to_half_a_step(decode, along, groups_shape, bits):
    """Codes, scales and minimums reproduce the values to within half a quantization step (plus the fp16
    rounding of the stored minimum and scale), in groups along the tokens (K) or the channels (V); int4
    codes two a byte, channel 2j in the low nibble."""
    import torch

    quantization = sys.modules[type(decode).__module__]
    x = torch.randn(1, 2, 70, 24, generator=torch.Generator().manual_seed(2)) * 3
    x[..., 5] *= 12  # an outlier channel
    stored = quantization.quantize(x, 16, along=along, bits=bits, name="k")
    packed = stored["k_codes"]
    assert packed.dtype == torch.uint8 and packed.shape == (*x.shape[:-1], 24 * bits // 8)
    assert stored["k_scale"].shape == groups_shape == stored["k_min"].shape
    codes = quantization.unpacked(packed, bits)
    if bits == 4:
        assert torch.equal(codes[..., 0], packed[..., 0] & 0xF) and torch.equal(codes[..., 1], packed[..., 0] >> 4)
    assert codes.max() == 2**bits - 1 and codes.min() == 0  # each group's range is used
    back = quantization.dequantize(stored, "k", 16, along=along, dtype=torch.float64, bits=bits)
    step = stored["k_scale"].double().repeat_interleave(16, dim=along).narrow(along, 0, x.shape[along])
    slack = 2.0**-10 * (x.abs().double() + step * (2**bits - 1))  # fp16 rounding of the minimum and the scale
    assert ((back - x.double()).abs() <= step / 2 + slack).all()


def test_an_int8_case_gives_kernels_the_quantized_cache_only(decode):
    import torch

    c = case(l=70, hkv=2, d=24, kv_dtype="int8", group=16)
    inputs = decode.make_inputs(c, seed=2, device="cpu", distribution="outliers")
    assert set(inputs) == {"q", "k_codes", "k_scale", "k_min", "v_codes", "v_scale", "v_min"}
    assert inputs["q"].dtype == torch.float16 and decode.dtype(c) == "fp16"
    # the fewest bytes: one byte a code (half a byte in int4), and an fp16 scale and minimum a group
    assert decode.cache_bytes(c) == 2 * (2 * 70 * 24) + 4 * (2 * 5 * 24 + 2 * 70 * 2)
    int4 = case(l=70, hkv=2, d=24, kv_dtype="int4", group=16)
    assert decode.cache_bytes(int4) == 2 * (2 * 70 * 24) / 2 + 4 * (2 * 5 * 24 + 2 * 70 * 2)
    assert decode.make_inputs(int4, seed=2, device="cpu")["v_codes"].shape == (1, 2, 70, 12)


def test_split_plan_covers_the_cache_in_whole_tiles(splitkv):
    for length in (1, 63, 64, 65, 1000, 131072):
        for splits in ("auto", "1", "3", "10000"):
            for block_n in splitkv.BLOCK_NS:
                n, keys = splitkv.split_plan(length, sequences_x_heads=8, sms=132, splits=splits, block_n=block_n)
                assert keys % block_n == 0 and (n - 1) * keys < length <= n * keys
                assert n <= math.ceil(length / block_n)
    # one sequence: four programs an SM would leave pieces of 31 tiles, so two (33 pieces of 4,032 keys,
    # whole tiles a piece); eight sequences: four (8 pieces of 16,384 keys, 256 tiles each)
    assert splitkv.split_plan(131072, sequences_x_heads=8, sms=132) == (33, 4032)
    assert splitkv.split_plan(131072, sequences_x_heads=64, sms=132) == (8, 16384)
    assert splitkv.split_plan(32768, sequences_x_heads=64, sms=132) == (8, 4096)  # 64 tiles: still long
    assert splitkv.split_plan(32768, sequences_x_heads=8, sms=132) == (32, 1024)
    # an int4 cache keeps four programs an SM at one sequence too (64 pieces of 32 and 8 tiles); eight
    # sequences' pieces are long anyway
    assert splitkv.split_plan(131072, sequences_x_heads=8, sms=132, bits=4) == (64, 2048)
    assert splitkv.split_plan(32768, sequences_x_heads=8, sms=132, bits=4) == (64, 512)
    # int4 and int8 caches: at least 64 pieces while each keeps 8 tiles (eight sequences: 64 instead of 8;
    # 4099 tokens, 65 tiles: 8 pieces of 9 tiles instead of 4, not 64 of one); int2 and 16-bit caches keep 8
    assert splitkv.split_plan(131072, sequences_x_heads=64, sms=132, bits=4) == (64, 2048)
    assert splitkv.split_plan(32768, sequences_x_heads=64, sms=132, bits=8) == (64, 512)
    assert splitkv.split_plan(4099, sequences_x_heads=64, sms=132, bits=4) == (8, 576)
    # ... where the pieces are long (four programs an SM): one int8 sequence, and 4099 tokens of 64
    # sequences x heads, keep two programs an SM (33, 32 and 4 pieces)
    assert splitkv.split_plan(131072, sequences_x_heads=8, sms=132, bits=8) == (33, 4032)
    assert splitkv.split_plan(32768, sequences_x_heads=8, sms=132, bits=8) == (32, 1024)
    assert splitkv.split_plan(4099, sequences_x_heads=64, sms=132, bits=8) == (4, 1088)
    assert splitkv.split_plan(131072, sequences_x_heads=64, sms=132, bits=2) == (8, 16384)
    # ... and only where its groups are whole tiles (groups of 48 gather their scales per element)
    assert splitkv.split_plan(131072, sequences_x_heads=64, sms=132, bits=4, whole_groups=False) == (8, 16384)
    assert splitkv.launch_plan(case(l=131072, batch=8, hq=32, hkv=8, d=128, kv_dtype="int4", group=48), 132,
                               4)["splits"] == 8
    assert splitkv.launch_plan(case(l=131072, hq=32, hkv=8, d=128, kv_dtype="int4", group=128), 132, 4)["splits"] == 64
    assert splitkv.row_tiling(4) == (16, 1) and splitkv.row_tiling(96) == (64, 2)


def test_a_ragged_batch_is_cut_by_its_tokens(splitkv):
    """Pieces are of one length for every sequence: a ragged batch counted as its number of sequences
    would give 1000+130000 the pieces of two long sequences (16 a head on 132 SMs: 128 programs for the
    long one); counted by its tokens, about as many as one sequence of 130,000 gets."""
    ragged = case(l="1000+130000", batch=2, hq=32, hkv=8, d=128)
    assert splitkv.sequences_x_heads_as_cut(ragged) == 9  # 131,000 tokens x 8 heads in 130,000-token rows
    plan = splitkv.launch_plan(ragged, 132, 0)
    pieces, keys = plan["splits"], plan["keys_per_split"]
    alone = splitkv.launch_plan(case(l=130000, hq=32, hkv=8, d=128), 132, 0)["splits"]
    assert (pieces, keys) == (29, 4544) and alone == 33
    assert math.ceil(1000 / keys) == 1  # the short sequence: one piece, its other 28 write an empty state
    for l, batch in ((130000, 2), (32768, 8), ("4096+4096", 2)):  # a uniform batch: its sequences
        c = case(l=l, batch=batch, hq=32, hkv=8, d=128)
        assert splitkv.sequences_x_heads_as_cut(c) == batch * 8


def test_int4_and_int2_programs_are_held_to_128_registers_in_their_default_form(splitkv):
    """splits=auto plans four programs of 4 warps an SM: int4 and int2 read through pointers with their
    scales spread are capped at 128 registers a thread; int8, 16-bit caches, TMA loads and scales gathered
    per element are not (they would spill)."""
    def options(kv_dtype, group=32, loads="pointers"):
        c = case(l=131072, batch=8, hq=32, hkv=8, d=128, kv_dtype=kv_dtype, group=group)
        bits = splitkv.CACHE_BITS[kv_dtype]
        return splitkv.partial_options(splitkv.launch_plan(c, 132, bits), bits, 4, loads)
    # eight sequences: int4 in 64 pieces (three stages), int2 in 8 (two)
    assert options("int4") == {"num_warps": 4, "num_stages": 3, "maxnreg": 128}
    assert options("int2") == {"num_warps": 4, "num_stages": 2, "maxnreg": 128}
    assert options("int4", group=128)["maxnreg"] == 128
    for unbounded in (options("int8"), options("fp16"), options("int4", loads="tma"), options("int4", group=48)):
        assert "maxnreg" not in unbounded


def test_the_pipeline_deepens_where_a_head_is_cut_into_many_pieces(splitkv):
    one_sequence, _ = splitkv.split_plan(32768, sequences_x_heads=8, sms=132)  # 33 pieces a head
    eight, _ = splitkv.split_plan(32768, sequences_x_heads=64, sms=132)  # 8
    assert splitkv.resolve_stages("auto", one_sequence) == 3 and splitkv.resolve_stages("auto", eight) == 2
    assert splitkv.resolve_stages("0", one_sequence) == 0 and splitkv.resolve_stages(4, eight) == 4


def test_kbench_run_decode_on_the_cpu(cli, tmp_path):
    from kbench import results

    out = tmp_path / "decode.jsonl"
    result = cli("run", "decode", "--l", "100", "--hq", "8", "--hkv", "2", "--d", "32", "--out", out)
    assert result.exit_code == 0, result.output
    assert {(r.impl, r.status) for r in results.read(out)} == {("sdpa", "OK"), ("triton-splitkv", "OK"),
                                                                ("cupy-bitdecode", "SKIP"),  # CUDA only
                                                                ("flashinfer", "SKIP")}
    explained = cli("explain", "decode", "--l", "100", "--hq", "8", "--hkv", "2", "--d", "32")
    assert explained.exit_code == 0, explained.output
    assert "GQA group" in explained.output and "KV cache bytes" in explained.output


def test_kbench_explain_shows_the_pieces_programs_and_depth_of_triton_splitkv(cli):
    """On an H200 (132 SMs): one sequence of 32k tokens is cut into 32 pieces a head, three stages deep;
    eight sequences of 128k tokens into 8, two deep, but 64 for an int4 cache; the grid counts the programs
    and the merge's."""
    def explained(*args):
        result = cli("explain", "decode", "--impl", "triton-splitkv", "--q", "1", "--hq", "32", "--hkv", "8",
                     "--d", "128", *args)
        assert result.exit_code == 0, result.output
        return " ".join(result.output.replace("│", " ").split())  # a wrapped cell's lines joined
    text = explained("--l", "32768", "--batch", "1")
    assert "32 of 1,024 keys a sequence x K/V head (automatic: at most 2 programs an SM" in text
    assert "8 (sequences x K/V heads) x 32 (pieces) x 1 (row blocks) = 256 programs" in text
    assert "pipelined 3 deep (stages=auto: 16 or more pieces a head)" in text
    assert "each one TMA copy from a tensor descriptor (loads=auto)" in text
    assert "the merge: 128 programs of one row and 32 channels, each loading 32 pieces' states at once" in text
    assert "4 of the GQA group (query heads x 1 queries) in 1 tile(s) of 16 rows (12 zero rows" in text
    text = explained("--l", "131072", "--batch", "8", "--kv-dtype", "int2")
    assert "8 of 16,384 keys a sequence x K/V head (automatic: at most 4 programs an SM" in text
    assert "= 512 programs" in text and "pipelined 2 deep" in text
    text = explained("--l", "131072", "--batch", "8", "--kv-dtype", "int4")
    assert "64 of 2,048 keys a sequence x K/V head (automatic: at least 64 for an int4 cache, 8 tiles" in text
    assert "= 4096 programs" in text and "pipelined 3 deep" in text
    assert "int4 codes two a byte" in text and "K's scales read once a tile, V's read once a tile" in text
    assert "loaded through pointers (loads=auto)" in text
    text = explained("--l", "1000+130000")  # a ragged batch: its pieces a sequence
    assert "1,000 tokens: 1, 130,000 tokens: 29; 224 programs past a sequence's end only write an empty state" in text


def test_the_suite_is_a_folder_with_its_kernels_beside_it():
    root = Path(__file__).resolve().parents[2]
    assert (root / "suites" / "decode" / "suite.py").is_file()
    assert {p.name for p in (root / "kernels" / "decode").glob("*.py")} >= {"sdpa.py", "triton_splitkv.py"}


def test_a_configuration_triton_cannot_fit_is_unsupported(registry, decode, monkeypatch):
    """Triton raises OutOfResources at a kernel's first launch when a configuration needs more shared
    memory than the GPU has (128-key int4 tiles with four stages on an H200): that is Unsupported, a
    SKIP naming the limit, not a crash."""
    import torch
    from triton.runtime.errors import OutOfResources

    from kbench.registry import Unsupported

    class TooLarge:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                raise OutOfResources(315392, 232448, "shared memory")
            return launch

    make = registry.implementations("decode")["triton-splitkv"].make
    monkeypatch.setitem(make.__globals__, "_partial", TooLarge())  # the module this registry's make runs in
    c = case(l=300, d=64)
    inputs = decode.make_inputs(c, seed=1, device="cpu")
    out = torch.empty_like(inputs["q"])
    run = make(c, inputs, out, block_n=128, stages=4, warps=4)
    with pytest.raises(Unsupported, match="block_n=128, stages=4, warps=4: out of resource: shared memory"):
        run()


def _timed(impl: str, median_ms: float, method: str = "cuda-events+l2-flush", samples=None, **values):
    from kbench.record import Record

    c = {**case(l=32768, hq=32, hkv=8, d=128).values, **values}
    samples = samples or [median_ms]
    return Record.from_json({
        "schema": 1, "suite": "decode", "impl": impl, "label": impl, "backend": "torch", "case": c,
        "case_key": ",".join(f"{k}={v}" for k, v in c.items()), "status": "OK", "reason": "", "baseline": "sdpa",
        "env": {"device": "cuda"},
        "timing": {"method": method, "samples": samples, "warnings": [],
                   "stats": {"median": median_ms, "p20": median_ms, "p80": median_ms, "n": 1}}})


def test_after_a_run_each_quantized_cache_is_set_against_the_fastest_fp16_call(decode):
    """The int4 and int8 calls of a shape against its fastest fp16 call (the median ratio) beside the
    byte limit (fp16's cache bytes over theirs: 3.20x for int4 in groups of 32, 3.76x in groups of 128),
    with the ratio's 95 % interval where the samples can set one; a shape without an fp16 call in the
    run gets no line, and a CPU-timed run none at all."""
    import io

    from rich.console import Console

    from kbench.report import print_tables

    spread = [0.96 + 0.08 * i / 29 for i in range(30)]  # 30 samples from 0.96 to 1.04 of the median
    records = [_timed("sdpa", 0.0404, kv_dtype="fp16", samples=[0.0404 * x for x in spread]),
               _timed("triton-splitkv", 0.0410, kv_dtype="fp16"),
               _timed("cupy-bitdecode", 0.0260, kv_dtype="int4"), _timed("sdpa", 0.0800, kv_dtype="int4"),
               _timed("cupy-bitdecode", 0.0202, kv_dtype="int4", group=128, samples=[0.0202 * x for x in spread]),
               _timed("cupy-bitdecode", 0.0315, kv_dtype="int8"),
               _timed("cupy-bitdecode", 0.5, kv_dtype="int4", batch=8)]  # no fp16 call of batch 8
    assert decode.run_lines(records) == [
        "l=32768, q=1, batch=1, hq=32, hkv=8, d=128: the fastest fp16 call, sdpa, 40.4 us",
        "  int8 in groups of 32, cupy-bitdecode: 31.5 us, 1.28x (1.78x fewer bytes)",
        "  int4 in groups of 32, cupy-bitdecode: 26.0 us, 1.55x (3.20x fewer bytes)",
        "  int4 in groups of 32, sdpa: 80.0 us, 0.51x (3.20x fewer bytes)",
        "  int4 in groups of 128, cupy-bitdecode: 20.2 us, 2.00x [1.93-2.07] (3.76x fewer bytes)"]
    out = io.StringIO()
    print_tables(records, Console(file=out, width=200))
    assert "decode, across the cases of this run" in out.getvalue() and "2.00x [1.93-2.07] (3.76x fewer bytes)" in out.getvalue()
    out = io.StringIO()
    print_tables([_timed(r.impl, r.median, "cpu-wall-clock", **r.case) for r in records], Console(file=out, width=200))
    assert "across the cases" not in out.getvalue()
