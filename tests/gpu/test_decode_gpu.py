"""The decode implementations right on a GPU, through `kbench run` (its workers compile the Triton kernel
instead of interpreting it): cache lengths of one token, a partial tile, several pieces and 128k tokens,
GQA 32/8 with one and four new queries, MQA, fp16, bf16, int8, int4 and int2 caches, against float64 through kbench's own check
(every input distribution, the timed calls checked too). cupy-bitdecode (CUDA C++ through CuPy) over the
same lengths at d 64 and 128, with groups that leave a partial group of tokens (4099, 1000 and 17 keys in
groups of 32), V groups that cross a lane's strip of channels, more rows than one m16 tile, both its
loops (every tile masked, or only a piece's last ones), V's scales applied to the values or to P, caches
whose tokens are not one after the other, and its tile, warps and pieces away from their defaults."""

from __future__ import annotations

import pytest

from kbench import results

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda")]

SWEEPS = (
    ("--l", "1,17,1000,4099,131072", "--hq", "32", "--hkv", "8", "--q", "1"),
    ("--l", "17,4099,131072", "--hq", "32", "--hkv", "8", "--q", "4"),
    ("--l", "17,4099,131072", "--hq", "16", "--hkv", "1", "--q", "1"),
)


@pytest.mark.parametrize("sweep", SWEEPS, ids=["gqa", "gqa-speculative", "mqa"])
def test_decode_is_right_through_kbench_run(cli, tmp_path, compiled_triton, sweep):
    out = tmp_path / "decode.jsonl"
    result = cli("run", "decode", *sweep, "--batch", "2", "--d", "128", "--kv-dtype", "fp16,bf16,int8,int4,int2",
                 "--device", "cuda", "--impl", "sdpa,triton-splitkv", "--timeout", "300", "--max-time", "0.2",
                 "--out", out)
    statuses = {(r.impl, r.case_key): (r.status, r.reason) for r in results.read(out)}
    wrong = {key: status for key, status in statuses.items() if status[0] != "OK"}
    assert statuses and not wrong, f"kbench run decode {' '.join(sweep)}: {wrong}\n{result.output[-3000:]}"
    assert result.exit_code == 0, result.output


def test_a_ragged_batch_is_right_through_kbench_run(cli, tmp_path, compiled_triton):
    """Ragged batches (one length a sequence, the cache as long as the longest): a sequence of one token
    beside one of 128k, and three of 17, 4099 and 1000 tokens, one and four new queries, every cache type."""
    out = tmp_path / "decode.jsonl"
    result = cli("run", "decode", "--l", "1+131072,17+4099+1000", "--hq", "32", "--hkv", "8", "--q", "1,4",
                 "--d", "128", "--kv-dtype", "fp16,bf16,int8,int4,int2", "--device", "cuda",
                 "--impl", "sdpa,triton-splitkv", "--timeout", "300", "--max-time", "0.1", "--out", out)
    statuses = {(r.impl, r.case_key): (r.status, r.reason) for r in results.read(out)}
    wrong = {key: status for key, status in statuses.items() if status[0] != "OK"}
    assert len(statuses) == 2 * 2 * 2 * 5 and not wrong, f"{wrong}\n{result.output[-3000:]}"


BITDECODE_SWEEPS = (
    ("--l", "1,17,1000,4099,131072", "--hq", "32", "--hkv", "8", "--q", "1", "--d", "128,64"),
    ("--l", "17,4099,131072", "--hq", "32", "--hkv", "8", "--q", "4", "--d", "128,64"),
    ("--l", "17,4099,131072", "--hq", "16", "--hkv", "1", "--q", "1,4", "--d", "128,64"),
    # V groups of 48 and 20 channels (a lane's 16-channel strip in one group, or across two), of 128 and 200
    # (a token's channels one group; K's groups of 200 tokens not whole tiles); 32 query
    # heads of one K/V head x 4 queries: 128 rows in 8 row blocks
    ("--l", "1000", "--hq", "32", "--hkv", "8", "--q", "3", "--d", "128", "--group", "48,20,128,200"),
    ("--l", "300", "--hq", "32", "--hkv", "1", "--q", "4", "--d", "128,64"),
)


@pytest.mark.usefixtures("needs_cupy")
@pytest.mark.parametrize("sweep", BITDECODE_SWEEPS, ids=["gqa", "gqa-speculative", "mqa", "v-groups", "rows"])
def test_cupy_bitdecode_is_right_through_kbench_run(cli, tmp_path, sweep):
    # cupy-bitdecode alone: sdpa's rows, which these cases would time too, are checked above
    out = tmp_path / "decode.jsonl"
    result = cli("run", "decode", *sweep, "--batch", "2", "--kv-dtype", "int4,int8,fp16,bf16", "--device", "cuda",
                 "--impl", "cupy-bitdecode", "--param", "masks=all,edge", "--timeout", "300",
                 "--max-time", "0.2", "--out", out)
    records = [r for r in results.read(out) if r.impl.startswith("cupy-bitdecode")]
    statuses = {(r.label, r.case_key): (r.status, r.reason) for r in records}
    assert {label for label, _ in statuses} == {"cupy-bitdecode[masks=all]", "cupy-bitdecode[masks=edge]"}
    wrong = {key: status for key, status in statuses.items() if status[0] != "OK"}
    assert statuses and not wrong, f"kbench run decode {' '.join(sweep)}: {wrong}\n{result.output[-3000:]}"
    assert result.exit_code == 0, result.output


def _rows_of_params(cli, tmp_path, impl: str, kv_dtypes: str, *params: str) -> dict:
    """kbench run decode of one implementation's --param choices at 4099 keys (partial tiles and groups)
    and 4 new queries: each of its rows' (label, case) -> (status, reason), once the run exited 0."""
    out = tmp_path / "decode.jsonl"
    result = cli("run", "decode", "--l", "4099", "--hq", "32", "--hkv", "8", "--q", "4", "--d", "128",
                 "--batch", "2", "--kv-dtype", kv_dtypes, "--device", "cuda", "--impl", impl, *params,
                 "--timeout", "300", "--max-time", "0.1", "--out", out)
    assert out.exists(), result.output[-3000:]  # a run refused before measuring writes no records
    statuses = {(r.label, r.case_key): (r.status, r.reason) for r in results.read(out) if r.impl == impl}
    wrong = {key: status for key, status in statuses.items() if status[0] != "OK"}
    assert not wrong and result.exit_code == 0, f"{wrong}\n{result.output[-3000:]}"
    return statuses


@pytest.mark.usefixtures("needs_cupy")
def test_cupy_bitdecode_params_are_right(cli, tmp_path):
    """Tiles of 16 and 64 keys, 2, 4 and 8 warps, and pieces fixed at 1 (the output written by the partial
    kernel itself) and 7, or automatic, in the form auto takes and in form=rows."""
    rows = _rows_of_params(cli, tmp_path, "cupy-bitdecode", "int4,int8", "--param", "form=auto,rows",
                           "--param", "tile=16,64", "--param", "warps=2,4,8", "--param", "splits=1,7,0")
    assert len(rows) == 72


@pytest.mark.usefixtures("needs_cupy")
def test_cupy_bitdecode_merges_pieces_over_many_rounds(cli, tmp_path):
    """About 600 pieces of a 128k-token cache: the merge's two warps load 32 pieces each a round, so 10
    rounds, each rescaling the running sums to a new maximum, and the warps' states merged at the end."""
    out = tmp_path / "decode.jsonl"
    result = cli("run", "decode", "--l", "131072", "--hq", "8", "--hkv", "2", "--q", "1", "--d", "128",
                 "--batch", "1", "--kv-dtype", "int4,fp16", "--device", "cuda", "--impl", "cupy-bitdecode",
                 "--param", "splits=600", "--timeout", "300", "--max-time", "0.1", "--out", out)
    records = [r for r in results.read(out) if r.impl == "cupy-bitdecode"]
    assert len(records) == 2 and all(r.status == "OK" for r in records), result.output[-3000:]
    assert all(r.config["splits"] > 9 * 64 for r in records), [r.config["splits"] for r in records]


@pytest.mark.usefixtures("needs_cupy")
@pytest.mark.parametrize("lengths, splits", [("4099", "0,7"), ("131072", "600")], ids=["pieces", "many-rounds"])
def test_cupy_bitdecode_merge_in_the_partial_kernel_is_right(cli, tmp_path, lengths, splits):
    """merge=last: the last block of each sequence x K/V head x row block merges the pieces. A K/V head's
    rows: 1 (one query head a K/V head, one new query: the four warps take a quarter of the pieces each and
    meet in shared memory), 3, 4 and 12 (GQA 32/8 x 3 new queries: blocks of 8 and 4 rows in the keys form,
    one of 12 in the rows form); d 64 and 128; 7, automatic and about 600 pieces (75 rounds of loads a warp).
    kbench checks every timed call, so a count not reset for the next call fails the row."""
    out = tmp_path / "decode.jsonl"
    result = cli("run", "decode", "--l", lengths, "--hq", "32", "--hkv", "8,32", "--q", "1,3", "--d", "64,128",
                 "--batch", "2", "--kv-dtype", "int4,fp16", "--device", "cuda", "--impl", "cupy-bitdecode",
                 "--param", "merge=last", "--param", "form=keys,rows", "--param", f"splits={splits}",
                 "--timeout", "300", "--max-time", "0.05", "--out", out)
    records = [r for r in results.read(out) if r.impl == "cupy-bitdecode"]
    wrong = {(r.label, r.case_key): (r.status, r.reason) for r in records if r.status != "OK"}
    assert records and not wrong and result.exit_code == 0, f"{wrong}\n{result.output[-3000:]}"
    assert len(records) == 2 * 2 * 2 * 2 * 2 * len(splits.split(","))
    assert all(r.config["merge"] == "last" and r.config["splits"] > 1 for r in records)


@pytest.mark.usefixtures("needs_cupy")
def test_cupy_bitdecode_ring_is_right(cli, tmp_path):
    """Codes through a ring of 2 and 3 tiles a warp in shared memory (cp.async), tiles of 16 and 32 keys,
    K groups of 32 tokens (whole tiles) and 48 (a 32-key tile across two groups), every cache type."""
    rows = _rows_of_params(cli, tmp_path, "cupy-bitdecode", "int4,int8,fp16", "--group", "32,48",
                           "--param", "stages=2,3", "--param", "tile=16,32")
    labels = {label for label, _ in rows}
    assert labels == {f"cupy-bitdecode[stages={stages}{tile}]" for tile in (",tile=16", "")
                      for stages in (2, 3)}, labels
    assert {key.split("kv_dtype=")[1].split(",")[0] for _, key in rows} == {"int4", "int8", "fp16"}


@pytest.mark.usefixtures("needs_cupy")
def test_cupy_bitdecode_ring_of_each_warp_is_right(cli, tmp_path):
    """Each warp's own ring of 2 and 3 tiles, copied by its lanes (ring_fill=lanes), through every check of
    kbench run: int4 and int8 caches (three stages of int8 tiles are 208 KiB, one block an SM), K groups of 128
    tokens (one row of K scales a tile, in the stage) and 48 (a tile across two groups: K's scales from global
    memory), V's scales on P and on the values."""
    rows = _rows_of_params(cli, tmp_path, "cupy-bitdecode", "int4,int8", "--group", "128,48",
                           "--param", "ring=2,3", "--param", "ring_fill=lanes")
    assert len(rows) == 8 and all(label.startswith("cupy-bitdecode[ring=") for label, _ in rows)


def test_triton_splitkv_params_are_right(cli, tmp_path, compiled_triton):
    """K/V tiles of 32 and 128 keys, 4 and 8 warps, each read through pointers and through tensor
    descriptors (four stages of 128 int4 keys need more shared memory than an H200 has: 315,392 bytes)."""
    rows = _rows_of_params(cli, tmp_path, "triton-splitkv", "fp16,int4", "--param", "block_n=32,128",
                           "--param", "warps=4,8", "--param", "stages=2", "--param", "loads=pointers,tma")
    assert len(rows) == 16


def test_triton_splitkv_pdl_is_right(cli, tmp_path, compiled_triton):
    """The merge launched as the partial kernel's programmatic dependent (pdl=1), waiting on the GPU for
    the pieces' states, against the plain launch: automatic pieces, and 65 (two rounds of the merge)."""
    rows = _rows_of_params(cli, tmp_path, "triton-splitkv", "fp16,int4", "--param", "pdl=0,1",
                           "--param", "splits=auto,65")
    assert len(rows) == 8


@pytest.mark.usefixtures("needs_cupy")
def test_cupy_bitdecode_keys_form_is_right(cli, tmp_path):
    """form=keys (Sᵀ = K Qᵀ, Pᵀ by movmatrix) at 4099 keys and 4 new queries (16 rows: two row blocks of 8)
    for every cache type, with K groups of 32 tokens (whole tiles) and 48 (a tile across two groups), V
    groups of 20 channels (a strip across two), tiles of 16 and 32 keys, both loops, and 1 piece (the
    output written by the partial kernel)."""
    rows = _rows_of_params(cli, tmp_path, "cupy-bitdecode", "int4,int8,fp16,bf16", "--group", "32,48,20",
                           "--param", "form=keys", "--param", "tile=16,32", "--param", "masks=all,edge",
                           "--param", "splits=0,1")
    assert {key.split("kv_dtype=")[1].split(",")[0] for _, key in rows} == {"int4", "int8", "fp16", "bf16"}
    assert len(rows) == (2 * 3 + 2) * 8  # quantized caches x groups, 16-bit caches once (no groups), x params


@pytest.mark.usefixtures("needs_cupy")
def test_cupy_bitdecode_v_scales_on_p_are_right(cli, tmp_path):
    """V's scales applied to P (v_scales=p) against applied to the values, where a token's channels are
    one group of V: 17, 4099 and 128k keys, one and four new queries, K groups of 128 tokens (whole
    tiles) and 200 (a tile across two), int4 and int8, d = 128; and d = 64 in groups of 64, under MQA."""
    out = tmp_path / "decode.jsonl"
    for sweep in (("--l", "17,4099,131072", "--hq", "32", "--hkv", "8", "--q", "1,4", "--d", "128", "--group", "128,200"),
                  ("--l", "1000", "--hq", "16", "--hkv", "1", "--q", "1", "--d", "64", "--group", "64")):
        result = cli("run", "decode", *sweep, "--batch", "2", "--kv-dtype", "int4,int8", "--device", "cuda",
                     "--impl", "cupy-bitdecode", "--param", "v_scales=values,p", "--timeout", "300",
                     "--max-time", "0.1", "--out", out)
        assert result.exit_code == 0, result.output[-3000:]
    records = [r for r in results.read(out) if r.impl == "cupy-bitdecode"]
    wrong = {(r.label, r.case_key): (r.status, r.reason) for r in records if r.status != "OK"}
    assert len(records) == 2 * (3 * 2 * 2 * 2 + 2) and not wrong, wrong
    assert {r.config["v_scales"] for r in records} == {"values", "p"}


@pytest.mark.usefixtures("needs_cupy")
def test_cupy_bitdecode_raw_codes_are_right(cli, tmp_path):
    """K's scales applied to the queries (k_scales=q: K's raw codes in the products, each row's minimum and
    offset terms by two more mma a k16 step) and V's raw codes (v_codes=raw: their offsets taken off by one
    more mma) against the converted codes: 17, 4099 and 128k keys, one and four new queries, K groups of 128
    tokens (V's scales on P) and 32 (on the values), int4 and int8, d = 128; the next tile's codes loaded
    ahead (pipe=k, kv); and d = 64 in groups of 64, under MQA."""
    out = tmp_path / "decode.jsonl"
    d128 = ("--hq", "32", "--hkv", "8", "--q", "1,4", "--d", "128")
    for sweep in (("--l", "17,4099,131072", *d128, "--group", "128", "--param", "k_scales=values,q",
                   "--param", "v_codes=converted,raw"),
                  ("--l", "17,4099,131072", *d128, "--group", "32", "--param", "k_scales=values,q"),
                  ("--l", "4099", *d128, "--group", "128,32", "--param", "k_scales=q", "--param", "pipe=k,kv"),
                  ("--l", "1000", "--hq", "16", "--hkv", "1", "--q", "1", "--d", "64", "--group", "64",
                   "--param", "k_scales=values,q", "--param", "v_codes=converted,raw")):
        result = cli("run", "decode", *sweep, "--batch", "2", "--kv-dtype", "int4,int8", "--device", "cuda",
                     "--impl", "cupy-bitdecode", "--timeout", "300", "--max-time", "0.1", "--out", out)
        assert result.exit_code == 0, result.output[-3000:]
    records = [r for r in results.read(out) if r.impl == "cupy-bitdecode"]
    wrong = {(r.label, r.case_key): (r.status, r.reason) for r in records if r.status != "OK"}
    assert len(records) == 3 * 2 * 2 * 4 + 3 * 2 * 2 * 2 + 2 * 2 * 2 * 2 + 2 * 4 and not wrong, wrong
    assert {(r.config["k_scales"], r.config["v_codes"]) for r in records} == {
        ("values", "converted"), ("q", "converted"), ("values", "raw"), ("q", "raw")}


@pytest.mark.usefixtures("needs_cupy")
@pytest.mark.parametrize("kv_dtype, group", [("int4", 128), ("int4", 32), ("int8", 128), ("fp16", 32)])
def test_cupy_bitdecode_reads_a_cache_whose_tokens_are_apart(registry, kv_dtype, group):
    """K, V (and V's scales) whose tokens are further apart than a row (rows padded, as in a cache with room
    for more channels): the kernel steps by the strides instead of the row's size, and writes the same
    output, bit for bit, as over the same cache laid out densely."""
    import torch

    from kbench.suite import Case

    suite, impl = registry.suite("decode"), registry.implementations("decode")["cupy-bitdecode"]
    case = Case({"l": 4099, "q": 1, "batch": 2, "hq": 32, "hkv": 8, "d": 128, "kv_dtype": kv_dtype, "group": group})
    inputs = suite.make_inputs(case, seed=3, device="cuda")

    def padded(t):  # the same values, each token's row followed by 16 bytes of padding
        pad = 16 // t.element_size()
        wide = torch.full((*t.shape[:-1], t.shape[-1] + pad), 7, dtype=t.dtype, device=t.device)
        wide[..., :t.shape[-1]] = t
        return wide[..., :t.shape[-1]]

    apart = {name: padded(t) if name in ("k", "v", "k_codes", "v_codes", "v_scale", "v_min") else t
             for name, t in inputs.items()}
    outputs = []
    for cache in (inputs, apart):
        out = suite.make_output(case, cache)
        run = impl.make(case, cache, out, **impl.params)
        run()
        torch.cuda.synchronize()
        outputs.append((out, run.config["dense_rows"]))
    (dense, was_dense), (strided, was_strided) = outputs
    assert was_dense and not was_strided
    assert torch.equal(dense, strided)
    ref = suite.reference(case, inputs)
    assert (dense.double() - ref).abs().max().item() < 0.05 * ref.abs().max().item()


@pytest.mark.usefixtures("needs_cupy")
@pytest.mark.parametrize("kv_dtype", ["int4", "int8", "fp16"])
def test_cupy_bitdecode_reads_queries_that_are_not_16_byte_aligned(registry, kv_dtype):
    """The keys form reads a lane's chunk of Q as 16-byte vectors where it is 16-byte aligned, one value at a
    time elsewhere: Q one element past an aligned address (every chunk 2 bytes off) gives the same output,
    bit for bit, as the same values aligned, with both row blocks' zero rows (GQA 32/8 and 3 queries:
    12 rows in two blocks of 8)."""
    import torch

    from kbench.suite import Case

    suite, impl = registry.suite("decode"), registry.implementations("decode")["cupy-bitdecode"]
    case = Case({"l": 4099, "q": 3, "batch": 2, "hq": 32, "hkv": 8, "d": 128, "kv_dtype": kv_dtype, "group": 128})
    inputs = suite.make_inputs(case, seed=4, device="cuda")
    q = inputs["q"]
    off = torch.empty(q.numel() + 1, dtype=q.dtype, device=q.device)[1:].view(q.shape)
    off.copy_(q)
    assert off.data_ptr() % 16 == 2 and q.data_ptr() % 16 == 0
    outputs = []
    for queries in (q, off):
        out = suite.make_output(case, inputs)
        run = impl.make(case, {**inputs, "q": queries}, out, **impl.params)
        run()
        torch.cuda.synchronize()
        assert run.config["form"] == "keys"
        outputs.append(out)
    assert torch.equal(outputs[0], outputs[1])
    ref = suite.reference(case, inputs)
    assert (outputs[0].double() - ref).abs().max().item() < 0.05 * ref.abs().max().item()


LOAD_ORDERS = ([{"prefetch": p} for p in (1, 2, 4)] + [{"lead": n} for n in (1, 8)]
               + [{"pipe": "none"}, {"pipe": "k"}, {"pipe": "kv"}, {"pipe": "kv", "prefetch": 1},
                  {"pipe": "kv", "lead": 4}, {"lead": 4, "prefetch": 2}, {"ring": 2}, {"ring": 3},
                  {"ring": 3, "prefetch": 1}, {"ring": 2, "ring_fill": "lanes"}, {"ring": 3, "ring_fill": "lanes"},
                  {"ring": 3, "ring_fill": "lanes", "prefetch": 1}])


@pytest.mark.usefixtures("needs_cupy")
@pytest.mark.parametrize("kv_dtype, group, masks", [("int4", 128, "edge"), ("int8", 128, "all"), ("fp16", 128, "edge"),
                                                    ("int4", 128, "all"), ("int4", 48, "edge"), ("int8", 32, "edge")])
def test_cupy_bitdecode_load_order_changes_no_bit(registry, kv_dtype, group, masks):
    """prefetch=N (L2 asked for the tiles ahead), lead=N (L2 asked for a warp's first tiles before Q is read),
    pipe=k|kv (each tile loading the next one's codes) and ring=N (the tiles without masks through shared
    memory: rounds of the block's tiles by bulk copies on sm_90, or each warp's own tiles by its lanes'
    cp.async with ring_fill=lanes; it needs masks=edge, and a 16-bit cache's stages do not fit at d 128)
    only move loads:
    over 4099 keys (a short last tile), 131072, and 300 (fewer tiles than a piece's warps), in pieces and
    in one, both loops, V's scales on P (groups of 128) and on the values, the output is the
    same bit for bit as the default's (pipe=auto: kv for int8, none elsewhere; pipe=none is one of the
    orders), and the record says what ran (pipe: quantized caches only). The
    pieces are fixed: pipe=kv changes the occupancy, from which splits=0 would choose other pieces (and
    another order of the sums)."""
    import torch

    from kbench.suite import Case

    suite, impl = registry.suite("decode"), registry.implementations("decode")["cupy-bitdecode"]
    hopper = torch.cuda.get_device_capability() >= (9, 0)
    orders = [order for order in LOAD_ORDERS if (kv_dtype != "fp16" or "pipe" not in order)
              and ("ring" not in order or ((hopper or order.get("ring_fill") == "lanes") and masks == "edge"
                                           and kv_dtype != "fp16"))]
    for length, splits in ((4099, 5), (4099, 1), (131072, 64), (300, 5)):
        case = Case({"l": length, "q": 1, "batch": 2, "hq": 32, "hkv": 8, "d": 128, "kv_dtype": kv_dtype,
                     "group": group})
        inputs = suite.make_inputs(case, seed=5, device="cuda")
        outputs = []
        for order in [{}] + orders:
            out = suite.make_output(case, inputs)
            run = impl.make(case, inputs, out, **{**impl.params, "splits": splits, "masks": masks, **order})
            run()
            torch.cuda.synchronize()
            assert {name: run.config[name] for name in order} == order
            outputs.append((order, out))
        for order, out in outputs:
            assert torch.equal(out, outputs[0][1]), f"{kv_dtype} L={length} splits={splits} {order}"
