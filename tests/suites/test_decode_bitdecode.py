"""cupy-bitdecode without a GPU: its parameter checks, the host's choice of pieces, the nvcc instance list,
and a numpy model of its kernel's register work, instruction by instruction (lop3, prmt, sub.rn.f16x2,
fma.rn.f16x2 as the PTX ISA defines them), checked against the suite's own dequantization for every
code and against Q Kᵀ and P V assembled from each lane's fragments by the PTX ISA's mma.m16n8k16
layout (suites/attention/mma_layout.py). The model mirrors cupy_bitdecode.cu function for function:
a change to one must be made to the other. On the GPU: tests/gpu/test_decode_gpu.py."""

from __future__ import annotations

import itertools
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from kbench.errors import UserError
from kbench.loader import load_helper
from kbench.registry import Unsupported, parse_param_args, variants
from kbench.suite import Case

ROOT = Path(__file__).resolve().parents[2]
layout = load_helper(ROOT / "suites" / "attention" / "mma_layout.py")

MAGIC, MAGIC_BYTES, MAGIC_64 = 0x64006400, 0x64646464, 0x54005400  # 1024's exponent; int4's high nibbles: 64's
MAGIC_PLUS_8, MAGIC_64_PLUS_8, MAGIC_PLUS_128 = 0x64086408, 0x54805480, 0x64806480  # with the middle code
SIGNS = 0x80008000  # an fp16 pair's sign bits
MIDDLE_CODE = {4: 8, 8: 128}


def case(l=17, q=1, batch=1, hq=8, hkv=2, d=64, kv_dtype="int4", group=32) -> Case:
    return Case({"l": l, "q": q, "batch": batch, "hq": hq, "hkv": hkv, "d": d, "kv_dtype": kv_dtype,
                 "group": group})


@pytest.fixture(scope="module")
def impl(registry):
    return registry.implementations("decode")["cupy-bitdecode"]


@pytest.fixture(scope="module")
def bd(impl):
    """The kernel file's module (its plans, checks and lane map)."""
    return sys.modules[impl.make.__module__]


@pytest.fixture(scope="module")
def quantization(registry):
    return sys.modules[type(registry.suite("decode")).__module__]


# ---- the instructions, on uint32 words (numpy arrays or ints) -------------------------------------------

def u32(x):
    return np.asarray(x, dtype=np.uint64).astype(np.uint32)


def lop3(a, b, c, lut: int):
    """lop3.b32 d, a, b, c, immLut: bit i of the LUT is the result for a, b, c bits (i>>2 & 1, i>>1 & 1, i & 1)
    (the LUT is F(0xF0, 0xCC, 0xAA))."""
    a, b, c = u32(a), u32(b), u32(c)
    out = np.zeros_like(a)
    for i in range(8):
        if lut >> i & 1:
            out |= (a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c)
    return out


def prmt(a, b, sel: int):
    """prmt.b32 d, a, b, c (generic mode): byte i of d is byte sel[4i+2:4i] of {b, a}, or its sign
    replicated when bit 4i+3 is set."""
    a, b = u32(a).astype(np.uint64), u32(b).astype(np.uint64)
    source = (b << np.uint64(32)) | a
    out = np.zeros_like(a)
    for i in range(4):
        nib = sel >> (4 * i) & 0xF
        byte = (source >> np.uint64(8 * (nib & 7))) & np.uint64(0xFF)
        if nib & 8:
            byte = np.where(byte & np.uint64(0x80), np.uint64(0xFF), np.uint64(0))
        out |= byte << np.uint64(8 * i)
    return out.astype(np.uint32)


def halves(x):
    """A word's two fp16 halves (low, high) as float64."""
    x = u32(x)
    return ((x & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float64),
            (x >> 16).astype(np.uint16).view(np.float16).astype(np.float64))


def word(lo, hi):
    """Two values rounded once to fp16, as one word (lo in the low half)."""
    lo = np.asarray(lo, dtype=np.float64).astype(np.float16).view(np.uint16).astype(np.uint32)
    hi = np.asarray(hi, dtype=np.float64).astype(np.float16).view(np.uint16).astype(np.uint32)
    return lo | (hi << 16)


def hsub2(a, b):
    (a0, a1), (b0, b1) = halves(a), halves(b)
    return word(a0 - b0, a1 - b1)


def hmul2(a, b):
    """mul.rn.f16x2: a·b exact (two fp16 numbers: 22 bits), rounded once."""
    (a0, a1), (b0, b1) = halves(a), halves(b)
    return word(a0 * b0, a1 * b1)


def hfma2(a, b, c):
    """fma.rn.f16x2: a·b + c exact, rounded once (exact in float64 for the magnitudes used here: an
    8-bit integer times an fp16 normal number, plus an fp16 number, spans fewer than 53 bits)."""
    (a0, a1), (b0, b1), (c0, c1) = halves(a), halves(b), halves(c)
    return word(a0 * b0 + c0, a1 * b1 + c1)


# ---- the .cu's fragment functions ------------------------------------------------------------------------

def raw_offset(high: bool, bits: int, centred: bool = False):
    """The pair the raw numbers are offset by: 1024, or 64 for int4's high nibbles; centred: with the
    middle code as well."""
    if bits == 8:
        return MAGIC_PLUS_128 if centred else MAGIC
    if high:
        return MAGIC_64_PLUS_8 if centred else MAGIC_64
    return MAGIC_PLUS_8 if centred else MAGIC


def k_raw(w, s: int, r: int, bits: int):
    """A K register's codes as raw fp16 numbers, offset + code, straight from lop3 / prmt."""
    if bits == 4:
        x = w[s // 2] >> np.uint32(8) if s % 2 else w[s // 2]
        return lop3(x, 0x00F000F0, MAGIC_64, 0xEA) if r else lop3(x, 0x000F000F, MAGIC, 0xEA)
    return prmt(w[s], MAGIC_BYTES, 0x4342 if r else 0x4140)


def k_operand(w, s: int, r: int, bits: int):
    if bits == 16:
        return w[2 * s + r]
    return hsub2(k_raw(w, s, r, bits), raw_offset(bool(r), bits))


def k_pair(sw, x: int, r: int, bits: int):
    if bits == 4:
        return prmt(sw[x], sw[x + 2], 0x7632 if r else 0x5410)
    return sw[2 * x + r]


def v_raw(wa, wb, jn: int, bits: int):
    """A V register's two keys' codes as raw fp16 numbers, offset + code."""
    if bits == 4:
        w, i = divmod(jn, 8)
        z = prmt(wa[w], wb[w], 0x5410 if i < 4 else 0x7632)
        x = z >> np.uint32(8) if i % 4 >= 2 else z
        return lop3(x, 0x00F000F0, MAGIC_64, 0xEA) if i % 2 else lop3(x, 0x000F000F, MAGIC, 0xEA)
    w, i = divmod(jn, 4)
    z = prmt(wa[w], wb[w], 0x5410 if i < 2 else 0x7632)
    return prmt(z, MAGIC_BYTES, 0x4341 if i % 2 else 0x4240)


def v_operand(wa, wb, jn: int, bits: int, centred: bool = False):
    if bits == 16:
        w = jn // 2
        return prmt(wa[w], wb[w], 0x7632 if jn % 2 else 0x5410)
    return hsub2(v_raw(wa, wb, jn, bits), raw_offset(bool(jn % 2), bits, centred))


def words_of(row_bytes: np.ndarray, offset: int, count: int):
    """``count`` little-endian 32-bit words of a row of bytes from byte ``offset`` (a lane's vector load)."""
    return [u32(int.from_bytes(row_bytes[offset + 4 * i: offset + 4 * i + 4].tobytes(), "little"))
            for i in range(count)]


# ---- the bit tricks, every code --------------------------------------------------------------------------

@pytest.mark.parametrize("centred", [False, True])
def test_the_magic_number_gives_every_int4_code_in_every_nibble(centred):
    """Each nibble of a word as its code, or (centred, v_scales=p's V) its code less 8, exactly."""
    codes = np.arange(16, dtype=np.uint32)
    middle = MIDDLE_CODE[4] if centred else 0
    for position in range(8):
        w = codes << np.uint32(4 * position)  # one code at nibble `position`, zeros elsewhere
        got = {}  # nibble -> decoded values, from the four pairs of the word
        for shifted, high in itertools.product((False, True), (False, True)):
            lo, hi = halves(hsub2(k_raw([w], int(shifted), int(high), 4), raw_offset(high, 4, centred)))
            got[2 * shifted + high] = lo  # nibbles 0, 1 (bits 0-3, 4-7), then 2, 3 after the shift
            got[4 + 2 * shifted + high] = hi  # nibbles 4, 5 (bits 16-19, 20-23), then 6, 7
        for nibble in range(8):
            expected = codes if nibble == position else np.zeros(16)
            assert np.array_equal(got[nibble], expected.astype(np.float64) - middle), (position, nibble)


@pytest.mark.parametrize("centred", [False, True])
def test_the_magic_number_gives_every_int8_code_in_every_byte(centred):
    """Each byte of a word as its code, or (centred) its code less 128, exactly."""
    codes = np.arange(256, dtype=np.uint32)
    middle, subtracted = (MIDDLE_CODE[8], MAGIC_PLUS_128) if centred else (0, MAGIC)
    for position in range(4):
        w = codes << np.uint32(8 * position)
        pairs = [halves(hsub2(prmt(w, MAGIC_BYTES, sel), subtracted)) for sel in (0x4140, 0x4342)]
        decoded = [pairs[0][0], pairs[0][1], pairs[1][0], pairs[1][1]]  # bytes 0, 1, 2, 3
        for byte in range(4):
            expected = codes if byte == position else np.zeros(256)
            assert np.array_equal(decoded[byte], expected.astype(np.float64) - middle)


@pytest.mark.parametrize("bits", [4, 8])
def test_raw_numbers_are_an_offset_plus_every_code(bits):
    """k_scales=q: lop3 / prmt alone give offset + code, exactly, for every code in every position: 1024 +
    code for int4's low nibbles and int8's bytes, 64 + code for int4's high nibbles; the offsets' pairs
    are those numbers negated."""
    codes = np.arange(2**bits, dtype=np.uint32)
    if bits == 4:
        for step in (0, 1):  # even steps take a word's nibbles 0 and 1 of each half, odd ones 2 and 3 (>> 8)
            for r, offset in ((0, 1024), (1, 64)):
                at = 8 * step + 4 * r
                word_ = (codes << np.uint32(at)) | (codes << np.uint32(at + 16))
                lo, hi = halves(k_raw([word_], step, r, bits))
                assert np.array_equal(lo, offset + codes) and np.array_equal(hi, offset + codes)
                assert halves(raw_offset(bool(r), bits) ^ SIGNS)[0] == -offset
    else:
        for r in (0, 1):
            w = [codes << np.uint32(16 * r) | codes << np.uint32(16 * r + 8)]
            lo, hi = halves(k_raw(w, 0, r, bits))
            assert np.array_equal(lo, 1024 + codes) and np.array_equal(hi, 1024 + codes)
            assert halves(raw_offset(bool(r), bits) ^ SIGNS)[0] == -1024


def test_the_centred_constants_are_the_sources(bd):
    """The model's constants for the raw numbers' offsets, centred or not, are the .cu's."""
    text = bd.SOURCE.read_text()
    for name, value in (("MAGIC", MAGIC), ("MAGIC_BYTES", MAGIC_BYTES), ("MAGIC_64", MAGIC_64),
                        ("MAGIC_PLUS_8", MAGIC_PLUS_8), ("MAGIC_64_PLUS_8", MAGIC_64_PLUS_8),
                        ("MAGIC_PLUS_128", MAGIC_PLUS_128), ("SIGNS", SIGNS)):
        assert re.search(rf"constexpr unsigned {name} = 0x{value:08x}u;", text), name
    assert "constexpr int MIDDLE_CODE = BITS == 4 ? 8 : 128;" in text


# Scales and minimums of several magnitudes and signs, fp16 as the suite stores them.
SCALES_MINIMUMS = [(0.0137, -1.93), (0.5, 0.0), (0.0009765625, 3.25), (1.7, -12.5), (0.06677, -0.0041),
                   (3.2e-4, 0.75)]


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("scale, minimum", SCALES_MINIMUMS)
def test_dequantized_fragments_equal_the_suites_dequantization(quantization, bits, scale, minimum):
    """code · scale + minimum through the conversion and one fma.rn.f16x2 is, bit for bit, the suite's
    float64 dequantization rounded to fp16, for every code value."""
    import torch

    levels = 2**bits
    codes = np.arange(levels, dtype=np.uint32)
    s = word(scale, scale)
    m = word(minimum, minimum)
    if bits == 4:
        raw = [k_operand([codes << np.uint32(4 * high)], 0, high, 4) for high in (0, 1)]
        converted = [halves(reg)[0] for reg in raw]
    else:
        raw = [hsub2(prmt(codes, MAGIC_BYTES, 0x4140), MAGIC)]
        converted = [halves(raw[0])[0]]
    for c, r in zip(converted, raw):
        assert np.array_equal(c, codes)
        got = halves(hfma2(r, s, m))[0]
        stored = {"x_codes": torch.tensor(codes, dtype=torch.uint8).reshape(1, 1, 1, levels)
                  if bits == 8 else torch.tensor(codes[0::2] | codes[1::2] << 4, dtype=torch.uint8).reshape(1, 1, 1, -1),
                  "x_scale": torch.tensor([[[[scale]]]], dtype=torch.float16),
                  "x_min": torch.tensor([[[[minimum]]]], dtype=torch.float16)}
        expected = quantization.dequantize(stored, "x", levels, along=-1, dtype=torch.float16, bits=bits)
        assert np.array_equal(got.astype(np.float16), expected.flatten().numpy()), (scale, minimum)


# ---- whole fragments: Q Kᵀ and P V from the lanes' registers ----------------------------------------------

def _cache(quantization, bits: int, d: int, keys: int, group: int, seed: int):
    """A random cache of ``keys`` tokens as the kernel receives it (codes, or fp16 values) and its
    dequantized fp16 values (float64), one sequence and head."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    k, v = (torch.randn(1, 1, keys, d, generator=gen) * 2 for _ in range(2))
    if bits == 16:
        k, v = k.half(), v.half()
        return {"k": k, "v": v}, k.double()[0, 0].numpy(), v.double()[0, 0].numpy()
    stored = {**quantization.quantize(k, group, along=-2, bits=bits, name="k"),
              **quantization.quantize(v, group, along=-1, bits=bits, name="v")}
    kd = quantization.dequantize(stored, "k", group, along=-2, dtype=torch.float16, bits=bits)
    vd = quantization.dequantize(stored, "v", group, along=-1, dtype=torch.float16, bits=bits)
    return stored, kd.double()[0, 0].numpy(), vd.double()[0, 0].numpy()


def _row_bytes(t) -> np.ndarray:
    """[keys, bytes]: a cache tensor's rows as bytes (codes, or fp16 values)."""
    a = t[0, 0].contiguous().numpy()
    return a.view(np.uint8).reshape(a.shape[0], -1)


def _halves_of(t) -> np.ndarray:
    return t[0, 0].contiguous().numpy().view(np.uint16).astype(np.uint32)


def _place(matrix, elements, registers):
    """Write a lane's register halves into ``matrix`` at the (row, column) of each, in the PTX order."""
    values = [h for reg in registers for h in halves(reg)]
    for (row, col), value in zip(elements, values):
        matrix[row, col] = value


def _k_register(stored, bits: int, d: int, group: int, key: int, t: int, step: int, r: int):
    """Register r of k16 step ``step`` for key ``key`` of lane t's K chunk, as the .cu builds it: the
    key's words, the bit trick, and (quantized) its group's scales and minimums from the lane's 16-byte
    loads of 8 of each."""
    kch = d // 4
    kwords = kch * bits // 32
    rows = _row_bytes(stored["k_codes"] if bits < 16 else stored["k"])
    reg = k_operand(words_of(rows[key], t * kwords * 4, kwords), step, r, bits)
    if bits < 16:
        sw, mw = _k_scale_words(stored, d, key // group, t, step)
        reg = hfma2(reg, k_pair(sw, step % 2, r, bits), k_pair(mw, step % 2, r, bits))
    return reg


def _k_scale_words(stored, d: int, group_index: int, t: int, step: int):
    """Lane t's 16-byte loads of K's scales and of its minimums for k16 step ``step`` (channels 8 (step / 2)
    .. + 7 of its chunk, two a word) in group of tokens ``group_index``."""
    ks, km = _halves_of(stored["k_scale"]), _halves_of(stored["k_min"])
    lo = t * (d // 4) + 8 * (step // 2)
    return ([ks[group_index, lo + 2 * i] | ks[group_index, lo + 2 * i + 1] << 16 for i in range(4)],
            [km[group_index, lo + 2 * i] | km[group_index, lo + 2 * i + 1] << 16 for i in range(4)])


def _v_register(bd, stored, bits: int, d: int, group: int, g: int, t: int, pr: int, jn: int, scaled: bool = True):
    """The register of lane (g, t) holding channel jn of its V strip for keys 2t + 8 pr and + 1: the two
    keys' words paired by prmt, the bit trick, and (quantized, ``scaled``) each key's scale and minimum of
    the strip's channel group there (one of two where the strip spans two); not ``scaled``: the codes
    the codes less the middle code (8 for int4, 128 for int8), as v_scales=p makes them."""
    vch = d // 8
    vwords = vch * bits // 32
    rows = _row_bytes(stored["v_codes"] if bits < 16 else stored["v"])
    ka, kb = 2 * t + 8 * pr, 2 * t + 8 * pr + 1
    reg = v_operand(*(words_of(rows[key], g * vwords * 4, vwords) for key in (ka, kb)), jn, bits, not scaled)
    if bits < 16 and scaled:
        vs, vm = _halves_of(stored["v_scale"]), _halves_of(stored["v_min"])
        cg0 = g * vch // group
        cg1 = min(cg0 + 1, math.ceil(d / group) - 1)
        cut = (cg0 + 1) * group - g * vch
        cg = cg1 if bd.v_span(d, group, bits) == 2 and jn >= cut else cg0
        reg = hfma2(reg, vs[ka, cg] | vs[kb, cg] << 16, vm[ka, cg] | vm[kb, cg] << 16)
    return reg


@pytest.mark.parametrize("bits, d", list(itertools.product((4, 8, 16), (64, 128))))
def test_lane_fragments_compute_q_k_transpose(bd, quantization, bits, d):
    """For one n8 tile of 8 keys: each lane's K registers (its key's words, the bit trick, its group's
    scales and minimums from its 16-byte loads) and Q registers (gathered in the same channel order),
    placed where mma.m16n8k16 reads them, multiply to Q Kᵀ over the dequantized cache."""
    group = 3  # several groups of tokens among the 8 keys
    stored, kd, _ = _cache(quantization, bits, d, keys=8, group=group, seed=bits + d)
    rng = np.random.default_rng(d)
    q = rng.standard_normal((16, d)).astype(np.float16)
    q_halves = q.view(np.uint16).astype(np.uint32)
    kch = d // 4
    s = np.zeros((16, 8))
    for step in range(d // 16):
        a_mat, b_mat = np.zeros((16, 16)), np.zeros((16, 8))
        for lane in range(32):
            g, t = divmod(lane, 4)
            _place(b_mat, layout.b_elements(lane), [_k_register(stored, bits, d, group, g, t, step, r) for r in (0, 1)])
            # Q: a0 = row g (r 0), a1 = row g + 8 (r 0), a2 = row g (r 1), a3 = row g + 8 (r 1)
            qa = []
            for r, h in ((0, 0), (0, 1), (1, 0), (1, 1)):
                row = g + 8 * h
                c0, c1 = (t * kch + bd.k_channel(bits, step, r, e) for e in (0, 1))
                qa.append(q_halves[row, c0] | q_halves[row, c1] << 16)
            _place(a_mat, layout.a_elements(lane), qa)
        s += a_mat @ b_mat
    expected = q.astype(np.float64) @ kd.T
    assert np.allclose(s, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bits, d, group", [(4, 64, 32), (4, 128, 48), (4, 128, 20), (8, 64, 12),
                                            (8, 128, 16), (16, 64, 32), (16, 128, 32)])
def test_lane_fragments_compute_p_v(bd, quantization, bits, d, group):
    """For one k16 step of 16 keys: each lane's V registers (two keys' words paired by prmt, the bit
    trick, each key's scale and minimum of the strip's one or two channel groups) placed where
    mma.m16n8k16 reads B, times P, land in O at the channels the .cu's merge reads them from."""
    vspan = bd.v_span(d, group, bits)
    assert vspan in (1, 2)
    stored, _, vd = _cache(quantization, bits, d, keys=16, group=group, seed=bits * d + group)
    p = np.random.default_rng(group).random((16, 16)).astype(np.float16).astype(np.float64)
    vch = d // 8
    o = np.full((16, d), np.nan)
    for jn in range(d // 8):
        b_mat = np.zeros((16, 8))
        for lane in range(32):
            g, t = divmod(lane, 4)
            _place(b_mat, layout.b_elements(lane),
                   [_v_register(bd, stored, bits, d, group, g, t, pr, jn) for pr in (0, 1)])
        tile = p @ b_mat  # columns n of n8 tile jn: the channels n·d/8 + jn
        for lane in range(32):
            for (row, col), (query_row, channel) in zip(layout.d_elements(lane), bd.lane_elements(bits, d, lane, "rows")["o"][jn]):
                kept = 8 * jn + col  # where the .cu's merge keeps it in shared memory, and reads it back as
                assert query_row == row and (kept % 8) * vch + kept // 8 == channel
                o[row, channel] = tile[row, col]
    assert not np.isnan(o).any()
    assert np.allclose(o, p @ vd, rtol=1e-12, atol=1e-12)


def test_the_lane_map_is_the_models(bd):
    """lane_elements (kbench explain's lane table) of the rows form says what the model above computes:
    lane 4g+t holds key g of each n8 tile of K, a quarter of the channels (int4: pairs 4 apart), and
    channel strip g of V."""
    for bits, d in itertools.product((4, 8, 16), (64, 128)):
        kch = d // 4
        seen = {}
        for lane in range(32):
            m = bd.lane_elements(bits, d, lane, "rows")
            g, t = divmod(lane, 4)
            for (nt, s), elements in m["k"].items():
                assert all(key == 8 * nt + g for key, _ in elements)
                for key, channel in elements:
                    assert t * kch <= channel < (t + 1) * kch
                    seen.setdefault((nt, key), []).append(channel)
            for (j, jn), elements in m["v"].items():
                assert {c for _, c in elements} == {g * (d // 8) + jn}
                assert sorted(k for k, _ in elements) == [16 * j + 2 * t + x for x in (0, 1, 8, 9)]
        # every key of a tile meets every channel exactly once over the steps and lanes
        assert all(sorted(channels) == list(range(d)) for channels in seen.values())
    assert bd.lane_elements(4, 128, 0, "rows")["k"][(0, 0)] == [(0, 0), (0, 4), (0, 1), (0, 5)]
    assert bd.lane_elements(8, 128, 5, "rows")["k"][(0, 1)] == [(1, 36), (1, 37), (1, 38), (1, 39)]


# ---- the host's side ---------------------------------------------------------------------------------------

def test_split_plan_covers_the_cache_in_whole_tiles(bd):
    for length, tile, warps in itertools.product((1, 17, 31, 32, 33, 1000, 4099, 131072), (16, 32, 64), (2, 4, 8)):
        for splits in (0, 1, 3, 10000):
            n, keys = bd.split_plan(length, programs=8, sms=132, resident=3, tile=tile, warps=warps, splits=splits)
            assert keys % tile == 0 and (n - 1) * keys < length <= n * keys, (length, tile, warps, splits)
            assert n <= math.ceil(length / tile)
            if splits == 0 and n > 1:  # automatic: never less than a tile per warp
                assert keys >= tile * warps
    # one wave: 132 SMs x 3 blocks for 8 (sequence x head) programs fit 49 pieces; 131072 keys in
    # tiles of 32 gives 49 pieces of 2,688 keys (84 tiles)
    assert bd.split_plan(131072, 8, 132, 3, 32, 4) == (49, 2688)
    # never past one wave: 64 programs x 7 pieces (448 blocks) would leave 52 for a second wave
    for programs in (1, 8, 16, 64, 100, 396, 1000):
        n, _ = bd.split_plan(131072, programs, 132, 3, 32, 4)
        assert n * programs <= max(396, programs)
    assert bd.split_plan(131072, 64, 132, 3, 32, 4)[0] == 6
    # a short cache: one piece per four tiles at most (one a warp)
    assert bd.split_plan(1000, 8, 132, 3, 32, 4) == (8, 128)
    assert bd.split_plan(17, 8, 132, 3, 32, 4) == (1, 32)
    assert bd.split_plan(4099, 64, 132, 3, 32, 4, splits=7) == (7, 608)
    with pytest.raises(Unsupported, match="splits=-1"):
        bd.split_plan(100, 8, 132, 3, 32, 4, splits=-1)


def test_groups_and_row_blocks(bd):
    assert bd.v_span(128, 32, 4) == 1 and bd.v_span(128, 48, 8) == 1 and bd.v_span(64, 8, 4) == 1
    assert bd.v_span(128, 20, 4) == 2 and bd.v_span(64, 12, 8) == 2
    assert bd.v_span(128, 7, 4) is None and bd.v_span(128, 7, 16) == 1  # a 16-bit cache has no groups
    assert [bd.row_blocks(r) for r in (1, 4, 16, 17, 32, 128)] == [1, 1, 1, 2, 2, 8]
    assert bd.smem_bytes(128, 4) == 4 * 16 * 138 * 4 and bd.smem_bytes(64, 2) == 2 * 16 * 74 * 4
    # the ring: int4, d 128, 32-key tiles: a lane's 16 K and 16 V words are 8 chunks, 4 KiB a warp and tile
    assert bd.smem_bytes(128, 4, 4, 32, 3) == 4096 + 3 * 4 * 4096
    assert bd.smem_bytes(64, 4, 4, 32, 2) == 4 * 16 * 74 * 4  # 1 KiB + 2 x 8 KiB: under the merge's bytes
    assert bd.smem_bytes(64, 4, 16, 32, 2) == 2048 + 2 * 4 * 8192  # fp16, d 64: 32 + 32 words a lane


@pytest.mark.parametrize("values, message", [
    ({"d": 96}, "head dim 96"),
    ({"d": 128, "group": 7}, "group 7 is shorter than d/8 = 16"),
    ({"kv_dtype": "int2"}, "int2 cache: cupy-bitdecode is built for int4, int8, fp16, bf16 caches"),
    ({"l": "17+40", "batch": 2}, "a ragged batch (one length a sequence): cupy-bitdecode takes one length"),
])
def test_cases_it_cannot_run_are_skips_with_the_reason(impl, values, message):
    assert message in impl.needs.supports(case(**values))


def test_supported_cases(impl):
    for c in (case(), case(d=128, kv_dtype="int8", group=48), case(kv_dtype="fp16", group=1),
              case(kv_dtype="bf16", d=128), case(d=64, group=8)):
        assert impl.needs.supports(c) is None, c.key


def test_params_are_checked_before_anything_runs(impl):
    assert impl.params == {"splits": 0, "tile": 32, "warps": "auto", "stages": 0, "masks": "auto", "form": "auto",
                           "v_scales": "auto", "k_scales": "values", "v_codes": "converted", "prefetch": 0, "lead": 0, "pipe": "auto",
                           "ring": 0, "ring_fill": "bulk", "merge": "last"}
    for arg, message in (("merge=first", "is not one of kernel, last"), ("tile=48", "is not one of 16, 32, 64"), ("warps=3", "is not one of auto, 2, 4, 8"),
                         ("masks=none", "is not one of auto, all, edge"), ("form=cols", "is not one of auto, rows, keys"),
                         ("v_scales=k", "is not one of auto, values, p"), ("k_scales=p", "is not one of values, q"),
                         ("v_codes=centred", "is not one of converted, raw"), ("prefetch=5", "is not one of 0, 1, 2, 3, 4"),
                         ("lead=3", "is not one of 0, 1, 2, 4, 8"), ("pipe=2", "is not one of auto, none, k, kv"),
                         ("ring=1", "is not one of 0, 2, 3, 4"), ("ring_fill=tma", "is not one of bulk, lanes"),
                         ("splits=-2", "splits takes 0"), ("splits=two", "is not an integer")):
        with pytest.raises(UserError, match=message):
            variants([impl], parse_param_args([arg]))
    labels = [v.label for v in variants([impl], parse_param_args(["tile=16,32", "splits=0,5"]))]
    assert labels == ["cupy-bitdecode[tile=16]", "cupy-bitdecode[tile=16,splits=5]", "cupy-bitdecode",
                      "cupy-bitdecode[splits=5]"]


def test_warps_auto_takes_eight_in_the_keys_form_at_d_128_only(bd):
    assert bd.resolve_warps("auto", "keys", 128) == 8
    assert bd.resolve_warps("auto", "keys", 64) == 4 and bd.resolve_warps("auto", "rows", 128) == 4
    assert bd.resolve_warps(2, "keys", 128) == 2 and bd.resolve_warps(8, "rows", 64) == 8


def test_the_nvcc_build_compiles_every_default_instance(bd):
    """tests/suites/test_cuda_sources.py compiles the .cu with -DKBENCH_INSTANTIATE: its list must hold
    each instance the default tile and warps launch (every cache type, d, V group span and form)."""
    text = bd.SOURCE.read_text()
    block = text[text.index("#ifdef KBENCH_INSTANTIATE"):]
    listed = {f"bitdecode_partial<{m}>" for m in re.findall(r"^KBENCH_BD_PARTIAL\((.*)\)$", block, re.MULTILINE)}
    listed |= {f"bitdecode_partial_keys<{m}>" for m in re.findall(r"^KBENCH_BD_KEYS\((.*)\)$", block, re.MULTILINE)}
    listed |= {f"bitdecode_combine<{m}>" for m in re.findall(r"^KBENCH_BD_COMBINE\((.*)\)$", block, re.MULTILINE)}
    assert listed == set(bd.default_instances())


def test_without_a_gpu_it_is_a_skip(registry, impl):
    from kbench.registry import skip_reason

    assert skip_reason(impl, case(), "cpu") == "needs a CUDA device"


def test_kbench_explain_shows_its_launch(cli):
    result = cli("explain", "decode", "--impl", "cupy-bitdecode", "--l", "131072", "--hq", "32", "--hkv", "8",
                 "--d", "128", "--kv-dtype", "int4")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "4 of the GQA group" in text and "K fragment of lane 4g+t" in text and "lop3" in text
    assert "cupy-bitdecode: lane table" in text


def test_explains_lane_table_is_the_forms(impl):
    """The lane table, a row a lane. In the keys form lane 5 (g 1, t 1) holds keys 1 and 9 at channels
    32 + {0, 4, 1, 5} (int4's pairs 4 apart), V's keys 2, 3, 10, 11 at channels 16, 17 (the first two of
    its strip) and O's rows 2, 3 there; in the rows form key 1 only, and V's channel 16 of O's first n8 tile."""
    c = case(l=131072, hq=32, hkv=8, d=128, kv_dtype="int4")
    keys = impl.explain(c, impl.params)["lane table"]
    assert [row["lane"] for row in keys] == [str(lane) for lane in range(32)]
    assert list(keys[5].values())[1:] == ["(1,32) (1,36) (9,32) (9,36) (1,33) (1,37) (9,33) (9,37)",
                                          "(2,16) (3,16) (2,17) (3,17) (10,16) (11,16) (10,17) (11,17)",
                                          "(2,16) (3,16) (2,17) (3,17)"]
    rows = impl.explain(c, dict(impl.params, form="rows"))["lane table"]
    assert list(rows[5].values())[1:] == ["(1,32) (1,36) (1,33) (1,37)", "(2,16) (3,16) (10,16) (11,16)",
                                          "(1,32) (1,48) (9,32) (9,48)"]


def test_kbench_explain_says_how_codes_and_scales_come_in(cli):
    """The loads line: codes into registers (the default) or a cp.async ring; K's scales once a tile where its
    keys share a group (groups of 32 tokens, tiles of 32 keys), once an n8 tile where they may not (48)."""
    def loads(*extra):
        result = cli("explain", "decode", "--impl", "cupy-bitdecode", "--l", "4099", "--hq", "32", "--hkv", "8",
                     "--d", "128", "--kv-dtype", "int4", *extra)
        assert result.exit_code == 0, result.output
        return " ".join(result.output.replace("│", " ").split())  # a wrapped cell's lines joined
    text = loads()
    assert "codes into registers as a warp starts a tile" in text and "for the tile's one group" in text
    text = loads("--group", "48", "--param", "stages=3")
    assert "a ring of 3 tiles a warp in shared memory, cp.async 2 tiles ahead" in text
    assert "once a k16 step and n8 tile" in text


def test_masks_auto_takes_the_loop_form_measured_faster_for_the_cache(impl):
    """masks=auto (the default): the edge-free loop for fp16, bf16 and int4 caches, every tile masked for int8;
    explain says which, and that auto chose it; all and edge as given."""
    def masks(kv_dtype, value="auto"):
        return impl.explain(case(kv_dtype=kv_dtype, l=4099), dict(impl.params, masks=value))["masks"]
    for kv_dtype in ("fp16", "bf16", "int4"):
        assert masks(kv_dtype) == ("a piece's last tiles clamp and mask; the tiles before them run a loop without "
                                   "either (masks=auto for this cache)")
    assert masks("int8") == "every tile clamps its keys to the cache and masks its scores (masks=auto for this cache)"
    assert masks("int8", "edge").startswith("a piece's last tiles") and "auto" not in masks("int8", "edge")
    assert masks("int4", "all") == "every tile clamps its keys to the cache and masks its scores"


def test_the_kernels_division_by_the_group_is_exact(bd):
    """divisor(d) gives the multiply-and-shift the kernel uses for key // group: exact for every key a head
    can hold (below 2**31), checked at the ends of the range, around every multiple of d below 2**16, and
    at random keys, for every group up to 4,096 and a few far larger."""
    import random

    rng = random.Random(0)
    top = 2**31 - 1
    for d in [*range(1, 4097), 65_535, 65_536, 1_000_003, 2**30, top]:
        magic, shift = bd.divisor(d)
        assert 0 < magic < 2**32
        keys = {0, 1, top, top - 1, *(rng.randrange(2**31) for _ in range(64))}
        keys |= {x for m in range(d, min(2**16, top), d) for x in (m - 1, m)} if d <= 4096 else set()
        keys |= {top // d * d, top // d * d - 1}
        assert all((x * magic) >> shift == x // d for x in keys), d


def test_the_merge_constants_are_the_sources(bd):
    """The launch's merge shape (cupy_bitdecode.py) is the one the .cu's merge is written for."""
    text = bd.SOURCE.read_text()
    assert f"constexpr int COMBINE_CHANNELS = {bd.COMBINE_CHANNELS};" in text
    assert f"constexpr int COMBINE_PIECES = {bd.COMBINE_PIECES};" in text
    assert f"constexpr int COMBINE_WARPS = {bd.COMBINE_WARPS};" in text


def movmatrix_trans(regs):
    """movmatrix.sync.aligned.m8n8.trans.b16 over a warp's registers (lane 4g + t holds row g, columns
    2t and 2t + 1 of an 8 x 8 matrix): each lane gets row g, columns 2t, 2t + 1 of the transpose."""
    m = np.zeros((8, 8), dtype=np.uint32)
    for lane, reg in enumerate(regs):
        g, t = divmod(lane, 4)
        m[g, 2 * t], m[g, 2 * t + 1] = int(reg) & 0xFFFF, int(reg) >> 16
    m = m.T
    return [m[lane // 4, 2 * (lane % 4)] | m[lane // 4, 2 * (lane % 4) + 1] << 16 for lane in range(32)]


@pytest.mark.parametrize("bits, d", list(itertools.product((4, 8, 16), (64, 128))))
def test_keys_form_fragments_compute_s_and_o_transposed(bd, quantization, bits, d):
    """form=keys: each lane's K registers as the A rows (keys g and g + 8 of a 16-key tile) against Qᵀ
    (query row g) give Sᵀ; P's C fragments of Sᵀ, packed and moved by movmatrix.trans, are Pᵀ's B
    registers; V's registers as the A rows (channels 2mi and 2mi + 1 of the lane's strip) against them
    give Oᵀ at the channels the .cu's merge writes."""
    group = 32
    stored, kd, vd = _cache(quantization, bits, d, keys=16, group=group, seed=7 * bits + d)
    rng = np.random.default_rng(bits * d)
    q = rng.standard_normal((8, d)).astype(np.float16)
    q_halves = q.view(np.uint16).astype(np.uint32)
    kch, vch = d // 4, d // 8
    lanes = [bd.lane_elements(bits, d, lane, "keys") for lane in range(32)]  # kbench explain's lane table
    st = np.zeros((16, 8))
    for step in range(d // 16):
        a_mat, b_mat = np.zeros((16, 16)), np.zeros((16, 8))
        for lane in range(32):
            g, t = divmod(lane, 4)
            # a0: key g, a1: key g + 8 (register r 0); a2, a3 (r 1)
            _place(a_mat, layout.a_elements(lane), [_k_register(stored, bits, d, group, g + 8 * h, t, step, r)
                                                    for r, h in ((0, 0), (0, 1), (1, 0), (1, 1))])
            for (row, col), (key, channel) in zip(layout.a_elements(lane), lanes[lane]["k"][(0, step)]):
                assert a_mat[row, col] == kd[key, channel]  # the lane table names the element each slot holds
            qb = []
            for r in (0, 1):
                c0, c1 = (t * kch + bd.k_channel(bits, step, r, e) for e in (0, 1))
                qb.append(q_halves[g, c0] | q_halves[g, c1] << 16)
            _place(b_mat, layout.b_elements(lane), qb)
        st += a_mat @ b_mat
    assert np.allclose(st, kd @ q.astype(np.float64).T, rtol=1e-12, atol=1e-12)

    # P (any values, fp16) in Sᵀ's C layout: lane (g, t) holds keys g, g + 8 x rows 2t, 2t + 1.
    p = rng.random((16, 8)).astype(np.float16)
    packed = {h: [word(p[g + 8 * h, 2 * t], p[g + 8 * h, 2 * t + 1]) for g, t in (divmod(lane, 4) for lane in range(32))]
              for h in (0, 1)}
    moved = {h: movmatrix_trans(packed[h]) for h in (0, 1)}
    pt_b = np.zeros((16, 8))
    for lane in range(32):
        _place(pt_b, layout.b_elements(lane), [moved[0][lane], moved[1][lane]])
    assert np.array_equal(pt_b, p.astype(np.float64))  # Pᵀ's B operand: keys x rows, exactly P

    ot = np.full((d, 8), np.nan)
    for mi in range(d // 16):
        a_mat = np.zeros((16, 16))
        for lane in range(32):
            g, t = divmod(lane, 4)
            # a0: channel 2mi, a1: 2mi + 1 (keys 2t, 2t+1); a2, a3 (keys 2t+8, 2t+9)
            _place(a_mat, layout.a_elements(lane), [_v_register(bd, stored, bits, d, group, g, t, pr, 2 * mi + c)
                                                    for pr, c in ((0, 0), (0, 1), (1, 0), (1, 1))])
            for (row, col), (key, channel) in zip(layout.a_elements(lane), lanes[lane]["v"][(0, mi)]):
                assert a_mat[row, col] == vd[key, channel]
        tile = a_mat @ pt_b  # rows: channel 2mi (g) and 2mi + 1 (g + 8) of strip g
        for lane in range(32):
            g, t = divmod(lane, 4)
            for (row, col), (query_row, channel) in zip(layout.d_elements(lane), lanes[lane]["o"][mi]):
                assert query_row == col and channel == g * vch + 2 * mi + row // 8  # where the .cu's merge writes it
                ot[channel, query_row] = tile[row, col]
    assert not np.isnan(ot).any()
    assert np.allclose(ot, vd.T @ p.astype(np.float64), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bits, d, group", [(4, 64, 32), (4, 128, 128), (8, 64, 64), (8, 128, 32)])
def test_keys_form_with_k_scales_on_q_computes_s(bd, quantization, bits, d, group):
    """k_scales=q: the raw numbers (offset + code) as the A rows against Q' = Q x each channel's scale
    (mul.rn.f16x2), plus the two common terms of every key (the minimums against Q, the offsets negated
    against Q'), give Sᵀ exactly as sum_c q'_c code_c + sum_c q_c minimum_c, within the rounding of each
    q'_c (and of the suite's own dequantization to fp16) of Sᵀ over the dequantized cache."""
    keys = 16  # one m16 tile: its keys are in one group of K's scales, as the instance requires
    stored, kd, _ = _cache(quantization, bits, d, keys=keys, group=group, seed=13 * bits + d)
    rng = np.random.default_rng(bits + d)
    q = (rng.standard_normal((8, d)) * rng.choice([0.01, 1.0, 30.0], size=(8, 1))).astype(np.float16)
    q_halves = q.view(np.uint16).astype(np.uint32)
    rows = _row_bytes(stored["k_codes"])
    kch, kwords = d // 4, d // 4 * bits // 32
    st, common = np.zeros((16, 8)), np.zeros((16, 8))
    q_scaled = np.zeros((8, d))  # each q'_c as the kernel rounds it
    for step in range(d // 16):
        raw, offsets, minimums = np.zeros((16, 16)), np.zeros((16, 16)), np.zeros((16, 16))
        b_q, b_qs = np.zeros((16, 8)), np.zeros((16, 8))
        for lane in range(32):
            g, t = divmod(lane, 4)
            sw, mw = _k_scale_words(stored, d, 0, t, step)  # the tile's keys are in group 0
            qb = []
            for r in (0, 1):
                c0, c1 = (t * kch + bd.k_channel(bits, step, r, e) for e in (0, 1))
                qb.append(q_halves[g, c0] | q_halves[g, c1] << 16)
            qs = [hmul2(qb[r], k_pair(sw, step % 2, r, bits)) for r in (0, 1)]
            for r in (0, 1):
                c0, c1 = (t * kch + bd.k_channel(bits, step, r, e) for e in (0, 1))
                q_scaled[g, c0], q_scaled[g, c1] = halves(qs[r])
            _place(b_q, layout.b_elements(lane), qb)
            _place(b_qs, layout.b_elements(lane), qs)
            _place(raw, layout.a_elements(lane), [k_raw(words_of(rows[g + 8 * h], t * kwords * 4, kwords), step, r, bits)
                                                  for r, h in ((0, 0), (0, 1), (1, 0), (1, 1))])
            _place(minimums, layout.a_elements(lane), [k_pair(mw, step % 2, r, bits) for r in (0, 0, 1, 1)])
            _place(offsets, layout.a_elements(lane), [raw_offset(bool(r), bits) ^ SIGNS for r in (0, 0, 1, 1)])
        st += raw @ b_qs
        common += minimums @ b_q + offsets @ b_qs
    assert np.all(common == common[:1])  # the same for every key: the .cu adds its registers to every score
    st += common
    codes = quantization.unpacked(stored["k_codes"], bits)[0, 0, :, :d].double().numpy()
    scale, minimum = (stored[name][0, 0, 0].double().numpy() for name in ("k_scale", "k_min"))
    assert np.allclose(st, codes @ q_scaled.T + (q.astype(np.float64) @ minimum)[None, :], rtol=1e-12, atol=1e-9)
    exact = (codes * scale + minimum) @ q.astype(np.float64).T  # the cache as quantized, not rounded to fp16
    # each q'_c rounded to fp16 (half an ulp: 2^-11 relative, or 2^-25 below fp16's normal range)
    slack = codes @ (np.abs(q.astype(np.float64) * scale) * 2.0**-11 + 2.0**-25).T
    assert np.all(np.abs(st - exact) <= slack + 1e-9 * np.abs(exact))
    # the suite's reference dequantizes to fp16 first: within that rounding too
    assert np.all(np.abs(st - kd @ q.astype(np.float64).T) <= slack + np.abs(kd) @ np.abs(q.astype(np.float64)).T * 2.0**-11)
    assert not np.allclose(st, codes @ q.astype(np.float64).T + (q.astype(np.float64) @ minimum)[None, :])  # scaled


def test_form_auto_takes_the_keys_form_where_it_can_run(bd):
    """form=auto: keys, but rows wherever a ring of stages is asked for (the keys form loads into
    registers only); rows and keys as given."""
    assert bd.resolve_form("auto") == "keys" and bd.resolve_form("auto", stages=3) == "rows"
    assert bd.resolve_form("rows") == "rows" and bd.resolve_form("keys") == "keys"
    assert "stages=0 only" in bd.check_config(case(d=128), 32, 4, "keys", 3)  # the keys form has no ring
    assert bd.check_config(case(d=128), 32, 4, "auto", 3) is None and bd.check_config(case(d=128), 32, 4, "keys") is None
    assert "prefetch asks L2" in bd.check_config(case(d=128), 32, 4, "rows", 0, "auto", 1)  # the keys form only
    assert "prefetch asks L2" in bd.check_config(case(d=128), 32, 4, "auto", 2, "auto", 1)
    assert "lead asks L2" in bd.check_config(case(d=128), 32, 4, "rows", 0, lead=1)  # the keys form only
    assert bd.check_config(case(d=128), 32, 4, "auto", 0, lead=8) is None
    assert bd.check_config(case(d=128), 32, 4, "auto", 0, "auto", 2) is None
    # pipe=k|kv: the next tile's codes into registers, quantized caches in the keys form only
    int4 = case(d=128, kv_dtype="int4", group=128)
    assert bd.check_config(int4, 32, 4, "auto", 0, "auto", 0, "kv") is None
    assert bd.check_config(int4, 32, 4, "auto", 0, "auto", 0, "k") is None
    assert "int4 or int8 cache" in bd.check_config(case(d=128, kv_dtype="fp16"), 32, 4, "auto", 0, "auto", 0, "k")
    assert "the keys form" in bd.check_config(int4, 32, 4, "rows", 0, "auto", 0, "kv")
    assert bd.instance(int4, 32, 4, 0, "keys", "p", pipe="kv") == \
        "bitdecode_partial_keys<4, false, 128, 32, 4, 1, true, true, false, false, true, 2>"
    assert bd.instance(int4, 32, 4, 0, "keys", "p", pipe="k").endswith("true, true, false, false, true, 1>")
    # pipe=auto: kv for a dense int8 cache in the keys form, none elsewhere (and no refusal: it asks nothing)
    assert bd.resolve_pipe("auto", 8, "keys") == "kv" and bd.resolve_pipe("auto", 8, "keys", dense=False) == "none"
    assert bd.resolve_pipe("auto", 4, "keys") == "none" == bd.resolve_pipe("auto", 8, "rows")
    assert bd.resolve_pipe("auto", 16, "keys") == "none" and bd.resolve_pipe("k", 4, "keys") == "k"
    assert bd.check_config(case(d=128, kv_dtype="fp16"), 32, 4, "rows", 0, "auto", 0, "auto") is None
    c = case(d=128, kv_dtype="int4", group=32)
    assert bd.instance(c, 32, 4, 0, "keys") == "bitdecode_partial_keys<4, false, 128, 32, 4, 1, true, false, false, false, true, 0>"
    assert bd.smem_bytes(128, 4, 4, 32, 0, "keys") == 4 * 8 * (2 + 128 + 4) * 4


def test_ring_is_the_keys_forms_loop_without_masks(bd):
    """ring=N: the keys form's tiles without masks come through a ring of N stages in shared memory, each a
    round of the block's tiles (the .cu's PIPE 3); it refuses what it cannot feed, and its stages, barriers
    and counts are counted in the block's shared memory."""
    int4, int8 = case(d=128, kv_dtype="int4", group=128), case(d=128, kv_dtype="int8", group=128)
    assert bd.check_config(int4, 32, 8, "auto", 0, ring=3) is None
    assert bd.check_config(int8, 32, 8, "keys", 0, pipe="auto", ring=2) is None  # auto: the ring, not kv
    for refused in ({"form": "rows"}, {"stages": 3}, {"pipe": "kv"}, {"pipe": "none", "masks": "all"}):
        args = {"form": "auto", "stages": 0, "pipe": "auto", "masks": "auto", **refused}
        assert "ring fills shared memory" in bd.check_config(int4, 32, 8, ring=2, **args), refused
    assert bd.resolve_pipe("auto", 8, "keys", ring=2) == "ring" == bd.resolve_pipe("none", 4, "keys", ring=3)
    assert bd.resolve_masks("auto", 8, ring=2) == "edge" and bd.resolve_masks("auto", 8) == "all"
    assert bd.instance(int4, 32, 8, 0, "keys", "p", pipe="ring") == \
        "bitdecode_partial_keys<4, false, 128, 32, 8, 1, true, true, false, false, true, 3>"
    # a stage: a round of the block's tiles (8 warps x 32 keys), its K and V rows (64 bytes a key each for int4 at
    # d 128) and, with V's scales on P, its 256 scales and 256 minimums, each with room for the 16 bytes before
    # them; the merge reuses the stages' bytes, a barrier and a count (8 + 4 bytes) a stage follow both
    assert bd.ring_stage_bytes(128, 4, 32, 8, True) == 2 * 256 * 64 + 2 * (512 + 16)
    assert bd.smem_bytes(128, 8, 4, 32, 0, "keys", ring=3, v_fold=True) == 3 * 33824 + 12 * 3
    # tiles of one group of K's scales: the rows of 128 scales (and of minimums) 256 keys can touch, 3 at
    # groups of 128 (two blocks an SM still fit at ring=3)
    assert bd.ring_stage_bytes(128, 4, 32, 8, True, group=128) == 33824 + 2 * 3 * 256
    assert 2 * (bd.smem_bytes(128, 8, 4, 32, 0, "keys", ring=3, v_fold=True, group=128) + 1024) <= 228 * 1024
    assert bd.smem_bytes(64, 4, 4, 32, 0, "keys", ring=2) == 2 * 2 * 128 * 32 + 12 * 2  # d 64: 32-byte rows
    assert bd.smem_bytes(128, 8, 4, 32, 0, "keys") == 8 * 8 * 134 * 4  # no ring, no barriers


def test_a_ring_a_warp_filled_by_its_lanes(bd):
    """ring_fill=lanes: each warp its own ring stages, one of its tiles each, copied by its lanes (the .cu's
    PIPE 4): the same refusals as the ring of rounds, itself refused without a ring, and its stages (no
    barriers) counted in the block's shared memory."""
    int4 = case(d=128, kv_dtype="int4", group=128)
    assert bd.check_config(int4, 32, 8, "auto", 0, ring=3, ring_fill="lanes") is None
    assert "with ring=2, 3 or 4" in bd.check_config(int4, 32, 8, ring=0, ring_fill="lanes")
    assert "ring fills shared memory" in bd.check_config(int4, 32, 8, pipe="kv", ring=2, ring_fill="lanes")
    assert bd.resolve_pipe("auto", 4, "keys", ring=2, ring_fill="lanes") == "ring-lanes"
    assert bd.instance(int4, 32, 8, 0, "keys", "p", pipe="ring-lanes") == \
        "bitdecode_partial_keys<4, false, 128, 32, 8, 1, true, true, false, false, true, 4>"
    # a stage: one tile's K and V rows (32 keys x 64 bytes each), its group's 128 K scales and 128 minimums, and
    # its 32 V scales and 32 minimums with room for the 16 bytes before them: 4,768 bytes, 16-byte pieces
    assert bd.warp_stage_bytes(128, 4, 32, True, True) == 2 * 32 * 64 + 2 * 256 + 2 * (64 + 16) == 4768
    assert bd.warp_stage_bytes(64, 16, 32, False) == 2 * 32 * 128
    lanes = bd.smem_bytes(128, 8, 4, 32, 0, "keys", ring=3, v_fold=True, group=128, ring_fill="lanes")
    assert lanes == 3 * 8 * 4768
    # three stages a warp keep two blocks of 8 warps an SM (228 KiB, 1 KiB a block reserved)
    assert 2 * (lanes + 1024) <= 228 * 1024
    # d 64: two stages of 32-key tiles (2 KiB a warp) are more than the merge's states; of 16-key tiles (1 KiB)
    # less, and the block takes the merge's 4 x 8 x 70 floats
    assert bd.smem_bytes(64, 4, 4, 32, 0, "keys", ring=2, ring_fill="lanes") == 2 * 4 * 2048
    assert bd.smem_bytes(64, 4, 4, 16, 0, "keys", ring=2, ring_fill="lanes") == 4 * 8 * 70 * 4


def test_v_scales_on_p_where_a_token_has_one_group(bd):
    """v_scales=auto: p (V's scales applied to P) in the keys form over a quantized cache whose V groups
    span the head, values elsewhere; p asked where it cannot run is a skip with the reason."""
    whole, strips = case(d=128, kv_dtype="int4", group=128), case(d=128, kv_dtype="int4", group=32)
    assert bd.resolve_v_scales("auto", whole, "keys") == "p"
    assert bd.resolve_v_scales("auto", case(d=64, kv_dtype="int8", group=96), "keys") == "p"
    assert bd.resolve_v_scales("auto", strips, "keys") == "values"
    assert bd.resolve_v_scales("auto", whole, "rows") == "values"
    assert bd.resolve_v_scales("auto", case(d=128, kv_dtype="fp16", group=128), "keys") == "values"
    assert bd.resolve_v_scales("values", whole, "keys") == "values"
    assert bd.check_config(strips, 32, 4) is None and bd.check_config(whole, 32, 4, "keys", 0, "values") is None
    assert "--group >= d = 128" in bd.check_config(strips, 32, 4, "keys", 0, "p")
    assert "--group >= d = 128" in bd.check_config(whole, 32, 4, "rows", 0, "p")
    assert bd.check_config(whole, 32, 4, "auto", 0, "p") is None
    assert bd.instance(whole, 32, 4, 0, "keys", "p") == "bitdecode_partial_keys<4, false, 128, 32, 4, 1, true, true, false, false, true, 0>"
    assert (bd.instance(whole, 32, 4, 0, "keys", "values", dense=False)
            == "bitdecode_partial_keys<4, false, 128, 32, 4, 1, true, false, false, false, false, 0>")


def test_k_scales_on_q_where_a_tile_is_one_group(bd):
    """k_scales=q runs in the keys form over a quantized cache whose groups of tokens are whole tiles; asked
    elsewhere it is a skip with the reason. Its instance is the keys form's with KFOLD set."""
    one, two = case(d=128, kv_dtype="int4", group=128), case(d=128, kv_dtype="int8", group=48)
    assert bd.check_config(one, 32, 8, "auto", 0, "auto", 0, "none", "q") is None
    assert bd.check_config(case(d=64, kv_dtype="int8", group=32), 32, 4, "keys", 0, "values", 0, "kv", "q") is None
    for c, tile, form in ((two, 32, "auto"), (one, 32, "rows"), (case(d=128, kv_dtype="fp16"), 32, "auto"),
                          (case(d=128, kv_dtype="int4", group=32), 64, "auto")):
        assert "k_scales=q folds K's scales into the queries" in bd.check_config(c, tile, 4, form, 0, "auto", 0, "none",
                                                                                  "q")
    assert (bd.instance(one, 32, 8, 0, "keys", "p", k_scales="q")
            == "bitdecode_partial_keys<4, false, 128, 32, 8, 1, true, true, true, false, true, 0>")
    assert bd.instance(one, 32, 8, 0, "keys", "p").endswith("true, true, false, false, true, 0>")


def test_v_codes_raw_where_v_scales_are_on_p(bd):
    """v_codes=raw runs where V's scales are on P (v_scales=auto or p, the keys form, V's groups spanning
    the head); elsewhere it is a skip with the reason. Its instance is the keys form's with VRAW set."""
    whole = case(d=128, kv_dtype="int4", group=128)
    assert bd.check_config(whole, 32, 8, "auto", 0, "auto", 0, "none", "values", "raw") is None
    assert bd.check_config(whole, 32, 8, "auto", 0, "p", 0, "kv", "q", "raw") is None
    for c, form, v_scales in ((whole, "auto", "values"), (whole, "rows", "auto"), (case(d=128, kv_dtype="int4", group=32),
                                                                                   "auto", "auto"),
                              (case(d=128, kv_dtype="fp16", group=128), "auto", "auto")):
        assert "v_codes=raw puts V's raw codes" in bd.check_config(c, 32, 4, form, 0, v_scales, 0, "none", "values", "raw")
    assert (bd.instance(whole, 32, 8, 0, "keys", "p", k_scales="q", v_codes="raw")
            == "bitdecode_partial_keys<4, false, 128, 32, 8, 1, true, true, true, true, true, 0>")


def test_dense_rows_is_whether_tokens_follow_one_another(bd):
    """The keys form's DENSE instance (a tile's rows at constant offsets from its first) only where each
    token's row follows the last: a cache cut from a longer one along the tokens still is, one cut along
    the channels is not, nor are V's scales of a cache whose scale rows are padded."""
    import torch

    codes = torch.zeros(2, 4, 300, 64, dtype=torch.uint8)
    assert bd.dense_rows(codes, codes)
    assert bd.dense_rows(codes[:, :, :100], codes[:, :, 7:200])  # fewer tokens of a longer cache
    assert not bd.dense_rows(codes, codes[..., :32])  # half of each row
    assert bd.dense_rows(codes[:, :, :1, :32], codes[:, :, :1, :32])  # one token: never stepped along
    scales = torch.zeros(2, 4, 300, 2, dtype=torch.float16)
    assert bd.dense_rows(codes, codes, scales[..., :1].contiguous())
    assert not bd.dense_rows(codes, codes, scales[..., :1])  # one scale a token, two elements apart


@pytest.mark.parametrize("bits, d, group", [(4, 64, 64), (4, 128, 128), (8, 128, 128), (4, 64, 200)])
def test_keys_form_with_v_scales_on_p_computes_o(bd, quantization, bits, d, group):
    """v_scales=p: V's codes less the middle code (not scaled) as the A rows, against Pᵀ whose keys are
    each multiplied by the key's scale before the rounding to fp16 and moved by movmatrix.trans, plus
    each row's sum of P x the key's middle value (minimum + middle code x scale) on every channel, give
    Oᵀ exactly as that sum of products, and within the rounding of P x scale of P V over the dequantized
    cache."""
    stored, _, vd = _cache(quantization, bits, d, keys=16, group=group, seed=11 * bits + d)
    scale = stored["v_scale"][0, 0, :, 0].double().numpy()  # one scale and minimum a token
    minimum = stored["v_min"][0, 0, :, 0].double().numpy()
    codes = np.rint((vd - minimum[:, None]) / scale[:, None])  # what the suite quantized each value from
    assert np.array_equal(codes, quantization.unpacked(stored["v_codes"], bits)[0, 0, :, :d].double().numpy())
    p = np.random.default_rng(group).random((16, 8)).astype(np.float32)  # keys x rows, fp32 as the kernel's exp2
    p_scaled = (p * scale[:, None].astype(np.float32)).astype(np.float16)  # the kernel's p0 *= scale, pack2
    packed = {h: [word(p_scaled[g + 8 * h, 2 * t], p_scaled[g + 8 * h, 2 * t + 1])
                  for g, t in (divmod(lane, 4) for lane in range(32))] for h in (0, 1)}
    moved = {h: movmatrix_trans(packed[h]) for h in (0, 1)}
    pt_b = np.zeros((16, 8))
    for lane in range(32):
        _place(pt_b, layout.b_elements(lane), [moved[0][lane], moved[1][lane]])
    middle = (minimum.astype(np.float32) + np.float32(MIDDLE_CODE[bits]) * scale.astype(np.float32)).astype(np.float64)
    bias = (p.astype(np.float64) * middle[:, None]).sum(0)  # each row's sum of P x middle value
    ot = np.full((d, 8), np.nan)
    for mi in range(d // 16):
        a_mat = np.zeros((16, 16))
        for lane in range(32):
            g, t = divmod(lane, 4)
            _place(a_mat, layout.a_elements(lane), [_v_register(bd, stored, bits, d, group, g, t, pr, 2 * mi + c, False)
                                                    for pr, c in ((0, 0), (0, 1), (1, 0), (1, 1))])
        tile = a_mat @ pt_b + bias[None, :]  # rows: channel 2mi (g) and 2mi + 1 (g + 8) of strip g
        for lane in range(32):
            for (row, col), (query_row, channel) in zip(layout.d_elements(lane), bd.lane_elements(bits, d, lane, "keys")["o"][mi]):
                ot[channel, query_row] = tile[row, col]
    assert not np.isnan(ot).any()
    centred = codes - MIDDLE_CODE[bits]
    assert np.allclose(ot, centred.T @ p_scaled.astype(np.float64) + bias[None, :], rtol=1e-12, atol=1e-12)
    exact = vd.T @ p.astype(np.float64)
    # the rounding of each P x scale to fp16 (half an ulp, 2^-11 relative) and of each dequantized value
    # to fp16 (the suite's; V here is that rounding)
    slack = ((np.abs(centred.T) @ np.abs(p_scaled.astype(np.float64))) * 2.0**-11 + np.abs(vd.T) @ np.abs(p) * 2.0**-11
             + np.abs(middle) @ np.abs(p) * 2.0**-23)
    assert np.all(np.abs(ot - exact) <= slack)
    assert not np.allclose(ot, centred.T @ p.astype(np.float64) + bias[None, :])  # the scales are applied


@pytest.mark.parametrize("bits, d, group", [(4, 64, 64), (4, 128, 128), (8, 128, 128), (8, 64, 200)])
def test_keys_form_with_raw_v_codes_computes_the_centred_product(bd, quantization, bits, d, group):
    """v_codes=raw: V's raw numbers (offset + code) as the A rows against Pᵀ, plus one more mma of each
    channel's offset and middle code, negated, against the same Pᵀ, give exactly the centred product of
    v_scales=p, (codes - middle code) x P', at every channel the .cu's merge reads."""
    stored, _, vd = _cache(quantization, bits, d, keys=16, group=group, seed=5 * bits + d)
    codes = quantization.unpacked(stored["v_codes"], bits)[0, 0, :, :d].double().numpy()
    rows, vwords = _row_bytes(stored["v_codes"]), d // 8 * bits // 32
    p_scaled = np.random.default_rng(group).random((16, 8)).astype(np.float16)  # P' as the kernel packs it
    pt_b = p_scaled.astype(np.float64)  # Pᵀ's B operand: keys x rows (movmatrix's transpose, checked above)
    ot = np.full((d, 8), np.nan)
    for mi in range(d // 16):
        raw, offsets = np.zeros((16, 16)), np.zeros((16, 16))
        for lane in range(32):
            g, t = divmod(lane, 4)
            regs, offs = [], []
            for pr, c in ((0, 0), (0, 1), (1, 0), (1, 1)):
                ka, kb = 2 * t + 8 * pr, 2 * t + 8 * pr + 1
                regs.append(v_raw(*(words_of(rows[key], g * vwords * 4, vwords) for key in (ka, kb)), 2 * mi + c, bits))
                offs.append(raw_offset(bool(c), bits, centred=True) ^ SIGNS)
                # less its offset and middle code, each half is v_scales=p's converted register's
                centred_halves = halves(_v_register(bd, stored, bits, d, group, g, t, pr, 2 * mi + c, False))
                for raw_half, offset_half, centred_half in zip(halves(regs[-1]), halves(offs[-1]), centred_halves):
                    assert raw_half + offset_half == centred_half
            _place(raw, layout.a_elements(lane), regs)
            _place(offsets, layout.a_elements(lane), offs)
        tile = offsets @ pt_b + raw @ pt_b  # the two mma into one accumulator
        for lane in range(32):
            for (row, col), (query_row, channel) in zip(layout.d_elements(lane), bd.lane_elements(bits, d, lane, "keys")["o"][mi]):
                ot[channel, query_row] = tile[row, col]
    assert not np.isnan(ot).any()
    centred = codes - MIDDLE_CODE[bits]
    assert np.array_equal(ot, centred.T @ pt_b)  # exact: integers times fp16 numbers, sums well inside float64
    # and the raw numbers alone are the codes plus each channel's offset: the second mma is what centres them
    assert not np.allclose(ot, codes.T @ pt_b)
