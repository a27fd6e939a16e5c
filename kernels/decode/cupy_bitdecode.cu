// Decode attention over a quantized KV cache on tensor cores (after BitDecoding, HPCA 2026):
// int4 / int8 codes dequantized in registers straight into mma.m16n8k16 B fragments.
// (bitdecode_partial_keys, further down, does the same work with both products transposed: the keys
// as the M rows and the codes in A fragments.)
//
// One block owns one K/V head of one sequence, one piece of the cache (split-KV, as in
// flash-decoding) and 16 query rows, the M rows of the m16 tile. The rows are that head's GQA
// group: the Hq / Hkv query heads reading the head times the Q new queries, row = head_in_group * Q
// + query, zero rows past the group (never stored); a group of more than 16 rows takes several
// row blocks (grid neighbours, so they read the same piece from L2). Each warp walks its own TN-key tiles
// of the piece (tiles warp, warp + WARPS, ...) with its own online softmax; at the end the warps'
// states are merged through shared memory, and the block writes either the output (one piece) or
// its m, l and unnormalised O (fp32), which the last block of its sequence x head x row block to
// finish (merge_pieces), or a second kernel (bitdecode_combine), merges by log-sum-exp.
//
// Codes are read from global memory with 64/128-bit loads into registers (no shared memory: each
// lane loads exactly the bytes of its own fragments), then turned into fp16 pairs with the
// magic-number trick: a code c OR-ed under the exponent of 0x6400 (fp16 1024, one unit per ulp)
// is the fp16 number 1024 + c, so
//     int4: lop3 (w & 0x000f000f) | 0x64006400 -> {1024 + n0, 1024 + n4} (bits 0-3 and 16-19);
//           (w & 0x00f000f0) | 0x54005400, under the exponent of 64 (whose ulp is 1/16), gives
//           {64 + n1, 64 + n5}; w >> 8 the next two nibbles;
//     int8: prmt(w, 0x64646464, 0x4140) -> {1024 + b0, 1024 + b1} (0x4342: b2, b3);
// (k_raw, v_raw: the raw numbers), then the offset (1024 or 64) is subtracted, exact, giving the code itself,
// and code * scale + minimum is one fma.rn.f16x2: a single rounding of the exact value, the same
// fp16 number as the suite's dequantization. The scale and minimum are applied after the
// conversion because each group has its own pair (K: per channel and group of tokens; V: per token
// and group of channels).
//
// Fragment layout (PTX ISA, mma.m16n8k16, 16-bit A/B): lane = 4 g + t. A (16 x 16): rows g and g + 8,
// k-columns 2t, 2t+1 (a0 a1) and 2t+8, 2t+9 (a2 a3). B (16 x 8): column g, k-rows 2t, 2t+1 (b0) and
// 2t+8, 2t+9 (b1). C (16 x 8): rows g and g + 8, columns 2t, 2t+1. The products are sums over k, so
// the channels (for S = Q K^T) and the keys (for O = P V) may sit in the k slots in any order, as
// long as both operands use the same one; the order is chosen so that each lane's bytes are
// contiguous in memory and the bit tricks' natural pairs are its fragments' pairs.
//
// Which lane holds which elements (key0: the tile's first key; the K chunk of lane t is channels
// [t D/4, (t+1) D/4), the V strip of lane g channels [g D/8, (g+1) D/8)):
//   S = Q K^T, n8 tile nt (keys key0 + 8 nt .. + 7), k16 step s (D/16 steps):
//     B: lane (g, t) holds key key0 + 8 nt + g, channels t D/4 + chan(s, r, e) for register r, half e:
//         int4:      chan = 8 (s / 2) + 2 (s % 2) + r + 4 e   (the pairs {c, c + 4} of one 32-bit word)
//         int8/fp16: chan = 4 s + 2 r + e                     (adjacent pairs)
//     A: lane (g, t) holds query rows g and g + 8 at those same channels (a0/a1: r = 0, a2/a3: r = 1).
//     C: S rows g, g + 8, keys key0 + 8 nt + 2t and + 1.
//   O += P V, k16 step j (keys key0 + 16 j .. + 15), n8 tile jn (D/8 tiles):
//     A: P from the C fragments of S tiles 2j (k 2t, 2t+1) and 2j + 1 (k 2t+8, 2t+9), no data movement.
//     B: lane (g, t) holds channel g D/8 + jn of keys key0 + 16 j + {2t, 2t+1} (b0) and
//        {2t+8, 2t+9} (b1): a pair of keys in one register, built from two keys' words by
//        prmt(wa, wb, 0x5410 / 0x7632) before the nibble or byte selects.
//     C: O rows g, g + 8, channels (2t) D/8 + jn and (2t + 1) D/8 + jn.
//
// No CUDA headers, so NVRTC (cupy.RawModule) and nvcc compile it alike.

#include "kbench_ptx.cuh"
#include "kbench_sm90.cuh"

namespace bitdecode {

using kbench_ptx::fast_exp2;
using kbench_ptx::exp2_row;
using kbench_ptx::Flag;
using kbench_ptx::mma_16816;
using kbench_ptx::neg_inf;
using kbench_ptx::pack2;
using kbench_ptx::row_max_of;

// ---- bit tricks (pure: the compiler may merge repeated ones) --------------------------------------

constexpr unsigned MAGIC = 0x64006400u;       // fp16 {1024, 1024}
constexpr unsigned MAGIC_BYTES = 0x64646464u;  // the exponent byte of 1024, for prmt
constexpr unsigned MAGIC_64 = 0x54005400u;     // fp16 {64, 64}: int4's high nibbles
// The same with the middle code taken off as well (centred codes: int4 c - 8, int8 c - 128), exact too.
constexpr unsigned MAGIC_PLUS_8 = 0x64086408u;     // fp16 {1032, 1032}
constexpr unsigned MAGIC_64_PLUS_8 = 0x54805480u;  // fp16 {72, 72}
constexpr unsigned MAGIC_PLUS_128 = 0x64806480u;   // fp16 {1152, 1152}
constexpr unsigned SIGNS = 0x80008000u;  // an fp16 pair's sign bits: x ^ SIGNS is -x
template <int BITS>
constexpr int MIDDLE_CODE = BITS == 4 ? 8 : 128;

// (a & MASK) | OR in one lop3: immLut = (0xF0 & 0xCC) | 0xAA.
template <unsigned MASK, unsigned OR>
__device__ __forceinline__ unsigned and_or(unsigned a) {
    unsigned d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "n"(MASK), "n"(OR));
    return d;
}

// Byte i of the result is byte SEL[4i+3:4i] of {b, a} (a: bytes 0-3, b: bytes 4-7).
template <unsigned SEL>
__device__ __forceinline__ unsigned prmt(unsigned a, unsigned b) {
    unsigned d;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "n"(SEL));
    return d;
}

__device__ __forceinline__ unsigned hsub2(unsigned a, unsigned b) {
    unsigned d;
    asm("sub.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// a * b rounded once (f16x2).
__device__ __forceinline__ unsigned hmul2(unsigned a, unsigned b) {
    unsigned d;
    asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// a * b + c rounded once (f16x2).
__device__ __forceinline__ unsigned hfma2(unsigned a, unsigned b, unsigned c) {
    unsigned d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// ---- loads ------------------------------------------------------------------------------------------

// WORDS 32-bit words from global memory, streamed (read once: not kept in L1). Not volatile: the
// cache is read-only while the kernel runs, so the compiler may move these loads ahead of the
// tensor-core work (what hides their latency).
template <int WORDS>
__device__ __forceinline__ void load_stream(unsigned (&w)[WORDS], const unsigned char* p) {
    if constexpr (WORDS % 4 == 0) {
#pragma unroll
        for (int i = 0; i < WORDS; i += 4)
            asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(w[i]), "=r"(w[i + 1]), "=r"(w[i + 2]), "=r"(w[i + 3])
                         : "l"(p + 4 * i));
    } else if constexpr (WORDS == 2) {
        asm("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
    } else {
        static_assert(WORDS == 1, "1, 2 or a multiple of 4 words");
        asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(w[0]) : "l"(p));
    }
}

// WORDS (1, 2 or a multiple of 4) 32-bit words from shared memory at p (16-byte aligned for 4 and more).
template <int WORDS>
__device__ __forceinline__ void load_shared(unsigned (&w)[WORDS], const unsigned char* p) {
    if constexpr (WORDS % 4 == 0) {
#pragma unroll
        for (int i = 0; i < WORDS; i += 4) {
            const uint4 x = *reinterpret_cast<const uint4*>(p + 4 * i);
            w[i] = x.x, w[i + 1] = x.y, w[i + 2] = x.z, w[i + 3] = x.w;
        }
    } else if constexpr (WORDS == 2) {
        const uint2 x = *reinterpret_cast<const uint2*>(p);
        w[0] = x.x, w[1] = x.y;
    } else {
        static_assert(WORDS == 1, "1, 2 or a multiple of 4 words");
        w[0] = *reinterpret_cast<const unsigned*>(p);
    }
}

// Asks L2 for the 128-byte line holding p, without waiting for it and without a register.
__device__ __forceinline__ void prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// WORDS (a multiple of 4) 32-bit words of scales or minimums: kept in L1, where the 8 lanes that
// share a chunk of channels, and the next keys of the same group, find them.
template <int WORDS>
__device__ __forceinline__ void load_cached(unsigned (&w)[WORDS], const unsigned short* p) {
    static_assert(WORDS % 4 == 0, "whole 16-byte loads");
#pragma unroll
    for (int i = 0; i < WORDS; i += 4)
        asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(w[i]), "=r"(w[i + 1]), "=r"(w[i + 2]), "=r"(w[i + 3])
                     : "l"(p + 2 * i));
}

// Copies WORDS (1, 2 or a multiple of 4) 32-bit words of a lane's codes from global memory into the
// lane's words i0 .. i0 + WORDS - 1 of a ring slot: word i at byte (i / 4) 512 + lane 16 + (i % 4) 4 of
// the slot (`lane_base` = slot + lane 16), so that a warp's 16-byte reads of one chunk are 512
// consecutive bytes (no bank conflicts). 16-byte pieces bypass L1 (.cg); smaller ones cannot (.ca).
template <int WORDS>
__device__ __forceinline__ void copy_words(unsigned lane_base, int i0, const unsigned char* src) {
    constexpr int PIECE = WORDS < 4 ? WORDS : 4;
#pragma unroll
    for (int c = 0; c < WORDS; c += PIECE) {
        const int i = i0 + c;
        const unsigned dst = lane_base + (i / 4) * 512 + (i % 4) * 4;
        if constexpr (PIECE == 4)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src + 4 * c) : "memory");
        else
            asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src + 4 * c), "n"(PIECE * 4)
                         : "memory");
    }
}

// The words copy_words put there, read back by the same lane (plain loads: ordered after the
// cp.async.wait_group that precedes them). `lane_words` = the slot + lane 16, as a word pointer.
template <int WORDS>
__device__ __forceinline__ void read_words(unsigned (&w)[WORDS], const unsigned* lane_words, int i0) {
    constexpr int PIECE = WORDS < 4 ? WORDS : 4;
#pragma unroll
    for (int c = 0; c < WORDS; c += PIECE) {
        const int i = i0 + c;
        const unsigned* at = lane_words + (i / 4) * 128 + (i % 4);
        if constexpr (PIECE == 4) {
            const uint4 x = *reinterpret_cast<const uint4*>(at);
            w[c] = x.x, w[c + 1] = x.y, w[c + 2] = x.z, w[c + 3] = x.w;
        } else if constexpr (PIECE == 2) {
            const uint2 x = *reinterpret_cast<const uint2*>(at);
            w[c] = x.x, w[c + 1] = x.y;
        } else {
            w[c] = *at;
        }
    }
}

// The 16-bit value at byte offset a from p (read-only, cached: scales and minimums). The offset is
// unsigned 32-bit, so an address is one 64-bit add.
__device__ __forceinline__ unsigned short load_half(const unsigned short* p, unsigned a) {
    unsigned short h;
    asm("ld.global.nc.u16 %0, [%1];\n" : "=h"(h) : "l"(reinterpret_cast<const unsigned char*>(p) + a));
    return h;
}

// Two of them, at byte offsets a and b, as {p[a], p[b]}.
__device__ __forceinline__ unsigned load_half_pair(const unsigned short* p, unsigned a, unsigned b) {
    return unsigned(load_half(p, a)) | (unsigned(load_half(p, b)) << 16);
}

__device__ __forceinline__ float half_to_float(unsigned short h) {
    float x;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(x) : "h"(h));
    return x;
}

// floor(x / d) for 0 <= x < 2^31 as (x * magic) >> shift: a 32 x 32-bit multiply and a shift instead of
// the dozen instructions of a division by a run-time value. The host finds magic and shift
// (cupy_bitdecode.py's divisor: magic = ceil(2^shift / d), shift = 31 + ceil(log2 d)).
struct Divisor {
    unsigned magic, shift;
};

__device__ __forceinline__ unsigned divide(unsigned x, Divisor d) {
    return static_cast<unsigned>((static_cast<unsigned long long>(x) * d.magic) >> d.shift);
}

// ---- fragments ----------------------------------------------------------------------------------------

template <int BITS, int D>
struct Lanes {
    static constexpr int KCH = D / 4;                // K channels of one key a lane holds
    static constexpr int KWORDS = KCH * BITS / 32;   // their 32-bit words
    static constexpr int VCH = D / 8;                // V channels (the strip) of one key a lane holds
    static constexpr int VWORDS = VCH * BITS / 32;
};

// Channel (within the lane's K chunk) of k16 step s, B register r, half e: see the header.
template <int BITS>
__device__ __forceinline__ int k_channel(int s, int r, int e) {
    return BITS == 4 ? 8 * (s / 2) + 2 * (s % 2) + r + 4 * e : 4 * s + 2 * r + e;
}

// The pair the raw numbers (k_raw, v_raw) are offset by: 1024, or 64 for int4's high nibbles (HIGH);
// CENTRED: with the middle code as well.
template <int BITS, bool CENTRED = false>
__device__ __forceinline__ constexpr unsigned raw_offset(bool high) {
    if (BITS == 8) return CENTRED ? MAGIC_PLUS_128 : MAGIC;
    if (high) return CENTRED ? MAGIC_64_PLUS_8 : MAGIC_64;
    return CENTRED ? MAGIC_PLUS_8 : MAGIC;
}

// Register r of k16 step s of an int4 or int8 key as raw fp16 numbers, offset + code, with no arithmetic
// after the lop3 / prmt: offset 1024 for int4's low nibbles (r 0) and int8's bytes, 64 for int4's high
// nibbles (r 1). Exact, as every code is an integer below 256 and the ulp there is at most 1.
template <int BITS>
__device__ __forceinline__ unsigned k_raw(const unsigned* w, int s, int r) {
    static_assert(BITS == 4 || BITS == 8, "codes");
    if constexpr (BITS == 4) {
        const unsigned x = (s % 2) ? w[s / 2] >> 8 : w[s / 2];
        return r ? and_or<0x00f000f0u, MAGIC_64>(x) : and_or<0x000f000fu, MAGIC>(x);
    } else {
        return r ? prmt<0x4342>(w[s], MAGIC_BYTES) : prmt<0x4140>(w[s], MAGIC_BYTES);
    }
}

// B register r of k16 step s of S = Q K^T from one key's words `w`; quantized codes come out as
// the codes themselves (fp16 integers: the raw numbers less their offset), scaled later.
template <int BITS>
__device__ __forceinline__ unsigned k_operand(const unsigned* w, int s, int r) {
    if constexpr (BITS == 16) return w[2 * s + r];
    else return hsub2(k_raw<BITS>(w, s, r), raw_offset<BITS>(r));
}

// The scales (or minimums) of the same two channels for k16 step 2w + x, from the lane's 4 words
// of them for channels 8w .. 8w + 7 of its chunk (two channels a word, in channel order).
template <int BITS>
__device__ __forceinline__ unsigned k_pair(const unsigned (&sw)[4], int x, int r) {
    if constexpr (BITS == 4) {  // channels {c, c + 4}, c = 2x + r: words x and x + 2, low or high halves
        return r ? prmt<0x7632>(sw[x], sw[x + 2]) : prmt<0x5410>(sw[x], sw[x + 2]);
    } else {  // channels {c, c + 1}, c = 4x + 2r: word 2x + r
        return sw[2 * x + r];
    }
}

// The register of channel jn of the lane's V strip for keys a and b (their words wa, wb), {a, b}, as raw
// fp16 numbers, offset + code (as k_raw: offset 1024, or 64 for int4's high nibbles, the odd channels).
template <int BITS>
__device__ __forceinline__ unsigned v_raw(const unsigned* wa, const unsigned* wb, int jn) {
    static_assert(BITS == 4 || BITS == 8, "codes");
    if constexpr (BITS == 4) {  // 8 channels a word
        const int w = jn / 8, i = jn % 8;
        const unsigned z = i < 4 ? prmt<0x5410>(wa[w], wb[w]) : prmt<0x7632>(wa[w], wb[w]);  // 4 of a, 4 of b
        const unsigned x = (i % 4) >= 2 ? z >> 8 : z;
        return (i % 2) ? and_or<0x00f000f0u, MAGIC_64>(x) : and_or<0x000f000fu, MAGIC>(x);
    } else {  // 4 channels a word
        const int w = jn / 4, i = jn % 4;
        const unsigned z = i < 2 ? prmt<0x5410>(wa[w], wb[w]) : prmt<0x7632>(wa[w], wb[w]);  // 2 of a, 2 of b
        return (i % 2) ? prmt<0x4341>(z, MAGIC_BYTES) : prmt<0x4240>(z, MAGIC_BYTES);
    }
}

// B register of channel jn of the lane's V strip for keys a and b: the codes (the raw numbers less their
// offset; CENTRED: less the middle code too, MIDDLE_CODE), or a 16-bit cache's values.
template <int BITS, bool CENTRED = false>
__device__ __forceinline__ unsigned v_operand(const unsigned* wa, const unsigned* wb, int jn) {
    if constexpr (BITS == 16) {  // 2 channels a word
        const int w = jn / 2;
        return (jn % 2) ? prmt<0x7632>(wa[w], wb[w]) : prmt<0x5410>(wa[w], wb[w]);
    } else {
        return hsub2(v_raw<BITS>(wa, wb, jn), raw_offset<BITS, CENTRED>(jn % 2));
    }
}

template <bool BF16>
__device__ __forceinline__ unsigned short to_bits(float x) {
    unsigned short h;
    if (BF16) {
        asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(x));
    } else {
        asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h) : "f"(x));
    }
    return h;
}

// Row `row` of a block's rows of the GQA group is query head kvh gqa + row / nq, new query row % nq:
// its offset in Q or O (strides sb, sh, sq) for sequence b.
__device__ __forceinline__ long long group_row(int b, int kvh, int gqa, int nq, int row, long long sb, long long sh,
                                               long long sq) {
    return b * sb + (kvh * gqa + row / nq) * sh + (row % nq) * sq;
}

// The first key of the piece [.., end) that row `row` of the group may not see: query i is the
// cache's position L - nq + i (bottom-right causal), so it sees the keys before L - nq + i + 1; a row
// past the group's `rows` (padding, never stored) sees the whole piece.
__device__ __forceinline__ int first_hidden_key(int row, int rows, int end, int L, int nq) {
    return row < rows ? min(end, L - nq + row % nq + 1) : end;
}

}  // namespace bitdecode

using namespace bitdecode;

// ---- what both forms of the partial kernel share --------------------------------------------------

// One K/V head's cache as a lane reads it: its K and V rows from the lane's own bytes, the scales and
// minimums of its K channels and of the head's V, the strides along the tokens, and the channel groups
// of the lane's V strip (the first, and with VSPAN 2 the next one from strip channel `cut` on).
// Within one head the offsets fit in 32 bits (the host checks): one IMAD a row, not a 64-bit product.
template <int BITS, int D>
struct HeadCache {
    const unsigned char* k_lane;  // key 0's bytes of the lane's K chunk (lane t: channels t D/4 ..)
    const unsigned char* v_lane;  // key 0's bytes of the lane's V strip (lane g: channels g D/8 ..)
    const unsigned short *ks_row, *km_row;  // (quantized) K's scales, minimums of the lane's channels
    const unsigned short *vs_row, *vm_row;  // V's scales, minimums of this head
    int ksl, vsl, ksg, vssl;  // bytes a key of K and V; elements a group of K's scales and a key of V's
    int cg0, cg1, cut;

    __device__ __forceinline__ HeadCache(const unsigned char* K, const unsigned char* V, const unsigned short* KS,
                                         const unsigned short* KM, const unsigned short* VS, const unsigned short* VM,
                                         int b, int kvh, int g, int t, int group, long long k_sb, long long k_sh,
                                         long long k_sl, long long v_sb, long long v_sh, long long v_sl,
                                         long long ks_sb, long long ks_sh, long long ks_sg, long long vs_sb,
                                         long long vs_sh, long long vs_sl) {
        using LN = Lanes<BITS, D>;
        constexpr bool QUANT = BITS < 16;
        k_lane = K + b * k_sb + kvh * k_sh + t * (LN::KWORDS * 4);
        v_lane = V + b * v_sb + kvh * v_sh + g * (LN::VWORDS * 4);
        const long long ks_lane = b * ks_sb + kvh * ks_sh + t * LN::KCH;  // into KS and KM
        const long long vs_head = b * vs_sb + kvh * vs_sh;                // into VS and VM
        ksl = static_cast<int>(k_sl), vsl = static_cast<int>(v_sl);
        ksg = static_cast<int>(ks_sg), vssl = static_cast<int>(vs_sl);
        ks_row = KS + ks_lane;
        km_row = KM + ks_lane;
        vs_row = VS + vs_head;
        vm_row = VM + vs_head;
        cg0 = QUANT ? (g * LN::VCH) / group : 0;
        cg1 = QUANT ? min(cg0 + 1, (D + group - 1) / group - 1) : 0;
        cut = QUANT ? (cg0 + 1) * group - g * LN::VCH : 0;
    }
};

// The scales and minimums of k16 step j's keys 16 j + 2t + 8 pr and + 1 (pr = 0, 1) in the V strip's
// group(s), paired as the B registers (rows form) or A registers (keys form) pair those keys. The byte
// offsets of the keys' rows are unsigned 32-bit, so each load's address is one 64-bit add (interior
// tiles: constants from row v_row0, key key0 + 2t's).
template <bool EDGE, int VSPAN, int BITS, int D, typename InCache>
__device__ __forceinline__ void load_v_scales(unsigned (&vs)[2][VSPAN], unsigned (&vm)[2][VSPAN],
                                              const HeadCache<BITS, D>& hc, InCache in_cache, int key0, int j,
                                              int t, unsigned v_row0) {
#pragma unroll
    for (int pr = 0; pr < 2; ++pr) {
        const unsigned ka = EDGE ? 2u * in_cache(key0 + 16 * j + 2 * t + 8 * pr) * hc.vssl
                                 : v_row0 + 2u * (16 * j + 8 * pr) * hc.vssl;
        const unsigned kb = EDGE ? 2u * in_cache(key0 + 16 * j + 2 * t + 8 * pr + 1) * hc.vssl : ka + 2u * hc.vssl;
#pragma unroll
        for (int x = 0; x < VSPAN; ++x) {
            const unsigned cg = 2u * (x ? hc.cg1 : hc.cg0);
            vs[pr][x] = load_half_pair(hc.vs_row, ka + cg, kb + cg);
            vm[pr][x] = load_half_pair(hc.vm_row, ka + cg, kb + cg);
        }
    }
}

// Softmax states i = first .. last - 1 (maximum m(i), sum sum(i), unnormalised O o(i, j) for j < V) merged
// by log-sum-exp into l and acc; returns the merged maximum, -inf where no state saw a key (each state
// then weighs 0, not NaN: its shift is 0).
template <int V, typename Max, typename Sum, typename Out>
__device__ __forceinline__ float merge_states(int first, int last, Max m, Sum sum, Out o, float& l, float (&acc)[V]) {
    float top = neg_inf();
    for (int i = first; i < last; ++i) top = fmaxf(top, m(i));
    const float shift = (top == neg_inf()) ? 0.f : top;
    l = 0.f;
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = 0.f;
    for (int i = first; i < last; ++i) {
        const float weight = fast_exp2(m(i) - shift);
        l += weight * sum(i);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += weight * o(i, j);
    }
    return top;
}

// The block's rows, once every warp has left its state in shared memory (sm_m, sm_l: WARPS x ROWS
// maxima and sums; sm_o: WARPS x ROWS rows of OSTRIDE floats, column `stored` of a row holding channel
// channel_of(stored)): merged by log-sum-exp, and written as the output (part_o null: one piece) or
// as the block's m, l and unnormalised O in slot `slot` of the pieces' states for bitdecode_combine.
template <int D, int ROWS, int OSTRIDE, int WARPS, bool BF16, typename ChannelOf>
__device__ __forceinline__ void write_block(const float* sm_m, const float* sm_l, const float* sm_o, int rows_here,
                                            ChannelOf channel_of, unsigned short* O, float* part_o, float* part_m,
                                            float* part_l, long long slot, int first_row, int b, int kvh, int gqa,
                                            int nq, long long o_sb, long long o_sh, long long o_sq) {
    for (int idx = threadIdx.x; idx < rows_here * D; idx += WARPS * 32) {
        const int r = idx / D, stored = idx % D;
        const int c = channel_of(stored);
        float l, acc[1];
        const float mx = merge_states(
            0, WARPS, [&](int w) { return sm_m[w * ROWS + r]; }, [&](int w) { return sm_l[w * ROWS + r]; },
            [&](int w, int) { return sm_o[(w * ROWS + r) * OSTRIDE + stored]; }, l, acc);
        if (part_o == nullptr) {  // the only piece: the output itself
            const int row = first_row + r;
            O[group_row(b, kvh, gqa, nq, row, o_sb, o_sh, o_sq) + c] = to_bits<BF16>(acc[0] / l);
        } else {
            part_o[(slot * 16 + r) * D + c] = acc[0];
            if (stored == 0) {
                part_m[slot * 16 + r] = mx;
                part_l[slot * 16 + r] = l;
            }
        }
    }
}

// merge=last: instead of a second kernel (bitdecode_combine), the last block of a program (sequence x
// K/V head x row block) to finish its piece merges every piece's state. Each block counts itself in
// counts[program] once its state is written; the one that takes the last ticket reads the others'
// states (fenced before the count, so the count orders them) and resets the count for the next call.
// At one sequence the merge kernel was a fifth of a 32k-key int4 call under Nsight Compute on an H100
// (5.2 of 24.8 us), its launch and its own trips to memory.
__device__ __forceinline__ bool last_piece(int* counts, long long program, int splits) {
    __shared__ int last;
    __threadfence();  // this thread's part of the state visible to every block before the block counts
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(counts + program, 1) == splits - 1;
        if (last) {
            counts[program] = 0;  // every piece has counted itself: ready for the next call
            __threadfence();      // the count seen before the states are read
        }
    }
    __syncthreads();
    return last;
}

// The pieces' states of a program's rows merged by log-sum-exp into O by one block: warp w takes row
// (w / WAYS) + k WARPS / WAYS and every WAYS-th piece from w % WAYS (WAYS = WARPS / rows where the rows
// are fewer than the warps, else 1), a lane D / 32 channels of O. A round takes MERGE_PIECES<D> pieces:
// lane i loads piece i's maximum and sum, every lane its channels of each piece's O (one float4 or
// float2 a piece), all at once; the round's maximum and sum come from warp shuffles, and each piece's
// weight from its lane. So 66 pieces (one sequence, GQA 32/8, 132 SMs x 4 blocks) are five trips to L2
// a warp at d = 128, and 8 pieces (eight sequences) one. (With 24 pieces a round at d = 128, ptxas for
// sm_90 spills three of the int4 loop's registers, 6 local accesses a tile; with 16, it reloads one, 3
// instructions more a tile than without the merge.) Where a row has several ways, they meet in shared
// memory (`scratch`, WARPS x (D + 2) floats). The states are read from L2 (ld.global.cg): other blocks
// wrote them.
template <int D>
constexpr int MERGE_PIECES = 2048 / D;  // 16 or 32: O's loads in flight, 64 registers a lane

template <int D, int WARPS, bool BF16>
__device__ __forceinline__ void merge_pieces(const float* part_o, const float* part_m, const float* part_l,
                                             long long program, int splits, int rows_here, float* scratch,
                                             unsigned short* O, int first_row, int b, int kvh, int gqa, int nq,
                                             long long o_sb, long long o_sh, long long o_sq) {
    constexpr int V = D / 32;  // channels a lane
    constexpr int P = MERGE_PIECES<D>;
    static_assert(V == 2 || V == 4, "d = 64 or 128");
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int ways = rows_here >= WARPS ? 1 : WARPS / rows_here;
    const int way = warp % ways, row_step = WARPS / ways;
    float* mine = scratch + warp * (D + 2);
    for (int r0 = 0; r0 < rows_here; r0 += row_step) {  // the same trips for every warp: the barrier below
        const int r = r0 + warp / ways;
        float mx = neg_inf(), l = 0.f, acc[V] = {};
        if (r < rows_here) {
            const long long first = program * splits * 16 + r;  // piece s's row: first + 16 s
            for (int s0 = way; s0 < splits; s0 += P * ways) {
                const int s = s0 + lane * ways;  // this lane's piece of the round (lanes past P: none)
                const bool mine_here = lane < P && s < splits;
                const float m_lane = mine_here ? __ldcg(part_m + first + 16LL * s) : neg_inf();
                const float l_lane = mine_here ? __ldcg(part_l + first + 16LL * s) : 0.f;
                float o[P][V];
#pragma unroll
                for (int i = 0; i < P; ++i) {
                    const long long at = first + 16LL * min(s0 + i * ways, splits - 1);  // past the last: weight 0
                    const float* src = part_o + at * D + lane * V;
                    if constexpr (V == 4) {
                        const float4 x = __ldcg(reinterpret_cast<const float4*>(src));
                        o[i][0] = x.x, o[i][1] = x.y, o[i][2] = x.z, o[i][3] = x.w;
                    } else {
                        const float2 x = __ldcg(reinterpret_cast<const float2*>(src));
                        o[i][0] = x.x, o[i][1] = x.y;
                    }
                }
                float round_max = fmaxf(mx, m_lane);
#pragma unroll
                for (int step = 16; step > 0; step /= 2)
                    round_max = fmaxf(round_max, __shfl_xor_sync(0xffffffffu, round_max, step));
                const float shift = (round_max == neg_inf()) ? 0.f : round_max;  // nothing visible so far
                const float alpha = fast_exp2(mx - shift);
                const float weight = fast_exp2(m_lane - shift);  // this lane's piece; none or nothing visible: 0
                float round_l = weight * l_lane;
#pragma unroll
                for (int step = 16; step > 0; step /= 2) round_l += __shfl_xor_sync(0xffffffffu, round_l, step);
                l = l * alpha + round_l;
#pragma unroll
                for (int j = 0; j < V; ++j) acc[j] *= alpha;
#pragma unroll
                for (int i = 0; i < P; ++i) {
                    const float w = __shfl_sync(0xffffffffu, weight, i);
#pragma unroll
                    for (int j = 0; j < V; ++j) acc[j] += w * o[i][j];
                }
                mx = round_max;
            }
        }
        if (ways > 1) {  // each way's state in shared memory, then the first way of the row merges them
            if (lane == 0) mine[D] = mx, mine[D + 1] = l;
#pragma unroll
            for (int j = 0; j < V; ++j) mine[lane * V + j] = acc[j];
            __syncthreads();
            if (way == 0 && r < rows_here) {
                merge_states(
                    warp, warp + ways, [&](int w) { return scratch[w * (D + 2) + D]; },
                    [&](int w) { return scratch[w * (D + 2) + D + 1]; },
                    [&](int w, int j) { return scratch[w * (D + 2) + lane * V + j]; }, l, acc);
            }
            __syncthreads();  // scratch free for the next rows
        }
        if (way == 0 && r < rows_here) {
            unsigned short* dst = O + group_row(b, kvh, gqa, nq, first_row + r, o_sb, o_sh, o_sq) + lane * V;
#pragma unroll
            for (int j = 0; j < V; ++j) dst[j] = to_bits<BF16>(acc[j] / l);
        }
    }
}

// ---- the kernels ------------------------------------------------------------------------------------

// edge_masks 1: the piece's tiles of TN keys from `start` that end before the first key hidden from some
// row (min(end, L - nq + 1)), so each of their keys is in the cache and visible to every row: they run with
// no clamped addresses and no masked scores. 0: none (every tile clamps and masks).
template <int TN>
__device__ __forceinline__ int tiles_without_masks(int edge_masks, int start, int end, int L, int nq) {
    return edge_masks ? max(0, (min(end, L - nq + 1) - start) / TN) : 0;
}

// The partial kernels' arguments (both forms take the same; the host passes them in this order).
#define BITDECODE_PARTIAL_PARAMS                                                                              \
    const unsigned short* __restrict__ Q, const unsigned char* __restrict__ K, const unsigned char* __restrict__ V,  \
        const unsigned short* __restrict__ KS, const unsigned short* __restrict__ KM,                             \
        const unsigned short* __restrict__ VS, const unsigned short* __restrict__ VM, unsigned short* __restrict__ O, \
        float* __restrict__ part_o, float* __restrict__ part_m, float* __restrict__ part_l, int* __restrict__ counts, \
        int hkv, int gqa, int nq, int L, int keys_per_split, int splits, int row_blocks, int group,                \
        int edge_masks, unsigned group_magic, unsigned group_shift,                                              \
        long long q_sb, long long q_sh, long long q_sq,                                                          \
        long long k_sb, long long k_sh, long long k_sl,                                                          \
        long long v_sb, long long v_sh, long long v_sl,                                                          \
        long long ks_sb, long long ks_sh, long long ks_sg,                                                       \
        long long vs_sb, long long vs_sh, long long vs_sl,                                                       \
        long long o_sb, long long o_sh, long long o_sq, float scale_log2, int prefetch, int lead, int ring_depth

// Bytes of dynamic shared memory of bitdecode_partial: the Q fragments during the loop, then the
// warps' states for the merge (the same bytes, reused after a barrier).
// During the loop (STAGES > 0) the ring of code tiles follows the Q fragments: STAGES slots of
// WARPS x CHUNKS x 512 bytes, each warp's part of a slot holding one of its tiles, CHUNKS 16-byte
// chunks a lane. The merge reuses the bytes of both.
template <int BITS, int D, int TN, int WARPS, int STAGES>
struct PartialSmem {
    static constexpr int OSTRIDE = D + 8;  // floats a row of a warp's O (padded: see the merge)
    static constexpr int Q_BYTES = (D / 16) * 32 * 16;
    static constexpr int MERGE_BYTES = WARPS * 16 * (2 + OSTRIDE) * 4;
    static constexpr int K_WORDS = (TN / 8) * (D / 4) * BITS / 32;     // a lane's K words of a tile
    static constexpr int LANE_WORDS = K_WORDS + (TN / 16) * 4 * (D / 8) * BITS / 32;  // then its V words
    static constexpr int CHUNKS = (LANE_WORDS + 3) / 4;
    static constexpr int WARP_BYTES = CHUNKS * 512;
    static constexpr int SLOT_BYTES = WARPS * WARP_BYTES;
    static constexpr int LOOP_BYTES = Q_BYTES + STAGES * SLOT_BYTES;
    static constexpr int BYTES = LOOP_BYTES > MERGE_BYTES ? LOOP_BYTES : MERGE_BYTES;
};

// BITS: 4 or 8 (codes, with scales and minimums) or 16 (an fp16 / bf16 cache, BF16 picks).
// TN keys a warp's tile. VSPAN: 1 when a lane's V strip lies in one channel group
// (group % (D/8) == 0), 2 when it may cross one group boundary (group > D/8).
// KG1: every tile's keys lie in one group of K's scales (group a multiple of TN), so a k16 step's
// scales and minimums are loaded and paired once for all n8 tiles. STAGES 0: each warp loads its
// tile's codes into registers when it starts the tile; STAGES >= 2: a ring of STAGES tiles a warp in
// shared memory, filled by cp.async STAGES - 1 tiles ahead (each lane copies and reads back only its
// own bytes, so no barrier is needed, only cp.async.wait_group).
// Strides are in elements, the codes' (K, V) in bytes. part_o null: one piece, O written here.
// The launch bounds ask for 12 warps an SM (168 registers a thread): each warp keeps one tile's
// loads in flight, and fewer warps leave the memory system short of requests.
template <int BITS, bool BF16, int D, int TN, int WARPS, int VSPAN, bool KG1, int STAGES>
__global__ void __launch_bounds__(WARPS * 32, WARPS <= 12 ? 12 / WARPS : 1)
bitdecode_partial(BITDECODE_PARTIAL_PARAMS) {
    using LN = Lanes<BITS, D>;
    using SM = PartialSmem<BITS, D, TN, WARPS, STAGES>;
    constexpr bool QUANT = BITS < 16;
    constexpr int NT = TN / 8;   // n8 tiles of S a tile
    constexpr int KT = TN / 16;  // k16 steps of P V a tile
    constexpr int DS = D / 16;   // k16 steps of Q K^T
    constexpr int DT = D / 8;    // n8 tiles of O
    constexpr int THREADS = WARPS * 32;
    static_assert(TN % 16 == 0 && D % 64 == 0, "tiles of 16 keys, d a multiple of 64");
    static_assert(BITS == 4 || BITS == 8 || BITS == 16, "4- or 8-bit codes, or 16-bit values");
    static_assert(!QUANT || !BF16, "a quantized cache's queries and output are fp16");
    static_assert(STAGES == 0 || STAGES >= 2, "no ring, or a ring of at least two tiles");

    extern __shared__ __align__(16) float smem[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;
    const int rb = blockIdx.x % row_blocks, split = blockIdx.x / row_blocks;
    const int bh = blockIdx.y, b = bh / hkv, kvh = bh % hkv;
    const int rows = gqa * nq;
    const int start = split * keys_per_split;
    const int end = min(start + keys_per_split, L);

    // ---- Q as A fragments in shared memory, [k16 step][lane] x 4 registers, in the channel order of
    // the K fragments (zero rows past the group). Row r of the block: query head r / Q of the group,
    // new query r % Q.
    uint4* sq = reinterpret_cast<uint4*>(smem);
    for (int idx = threadIdx.x; idx < DS * 32; idx += THREADS) {
        const int st = idx / 32, ln = idx % 32;
        unsigned reg[4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = rb * 16 + ln / 4 + 8 * h;
            const bool valid = row < rows;
            const unsigned short* q = Q;
            if (valid) q += group_row(b, kvh, gqa, nq, row, q_sb, q_sh, q_sq) + (ln % 4) * LN::KCH;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const unsigned lo = valid ? q[k_channel<BITS>(st, r, 0)] : 0u;
                const unsigned hi = valid ? q[k_channel<BITS>(st, r, 1)] : 0u;
                reg[2 * r + h] = lo | (hi << 16);  // a0: row g, a1: row g + 8 (r = 0); a2, a3 (r = 1)
            }
        }
        sq[idx] = make_uint4(reg[0], reg[1], reg[2], reg[3]);
    }
    __syncthreads();

    // Per row of this lane (g, g + 8): the first key it may not see.
    int limit[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) limit[h] = first_hidden_key(rb * 16 + g + 8 * h, rows, end, L, nq);

    float o[DT][4];
    float row_max[2] = {neg_inf(), neg_inf()};
    float row_sum[2] = {0.f, 0.f};  // this lane's part of the row's sum; the quad adds them at the end
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[dt][e] = 0.f;

    const HeadCache<BITS, D> hc(K, V, KS, KM, VS, VM, b, kvh, g, t, group, k_sb, k_sh, k_sl, v_sb, v_sh, v_sl, ks_sb,
                                ks_sh, ks_sg, vs_sb, vs_sh, vs_sl);
    const Divisor group_div{group_magic, group_shift};  // key / group, K's group of tokens
    const int n_tiles = (end - start + TN - 1) / TN;

    // The ring (STAGES > 0): this warp's part of slot s starts at ring + s SLOT_BYTES, this lane's at
    // + lane 16. Keys past the cache are read at its last key (finite values; their scores are masked).
    const unsigned ring = kbench_ptx::smem_addr(smem) + SM::Q_BYTES + warp * SM::WARP_BYTES + lane * 16;
    const unsigned* ring_words = reinterpret_cast<const unsigned*>(reinterpret_cast<const unsigned char*>(smem) +
                                                                   SM::Q_BYTES + warp * SM::WARP_BYTES) + lane * 4;
    auto fill = [&](int tile, int slot) {  // one commit group a call, empty past the last tile
        if (tile < n_tiles) {
            const int key0 = start + tile * TN;
            const unsigned base = ring + slot * SM::SLOT_BYTES;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
                copy_words<LN::KWORDS>(base, nt * LN::KWORDS, hc.k_lane + min(key0 + 8 * nt + g, L - 1) * hc.ksl);
#pragma unroll
            for (int j = 0; j < KT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    copy_words<LN::VWORDS>(base, SM::K_WORDS + (4 * j + e) * LN::VWORDS,
                                           hc.v_lane + min(key0 + 16 * j + 2 * t + (e & 1) + 8 * (e >> 1), L - 1) * hc.vsl);
        }
        kbench_ptx::cp_async_commit();
    };
    if constexpr (STAGES > 0) {
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) fill(warp + s * WARPS, s);
    }

    // Tiles [0, interior) run with no clamped addresses and no masked scores (EDGE false), the piece's last
    // ones with both (tiles_without_masks). The tile's body is one generic lambda, instantiated for both.
    const int interior = tiles_without_masks<TN>(edge_masks, start, end, L, nq);
    auto run_tile = [&](auto edge, int tile, int it) {
        constexpr bool EDGE = decltype(edge)::value;
        auto in_cache = [&](int key) { return EDGE ? min(key, L - 1) : key; };  // a key past L reads the last
        const int key0 = start + tile * TN;
        unsigned kc[NT][LN::KWORDS];
        unsigned vc[KT][4][LN::VWORDS];  // keys 16j + 2t, 2t+1, 2t+8, 2t+9
        if constexpr (STAGES > 0) {
            fill(tile + (STAGES - 1) * WARPS, (it + STAGES - 1) % STAGES);
            kbench_ptx::cp_async_wait<STAGES - 1>();  // this tile's group is in
            const unsigned* words = ring_words + (it % STAGES) * (SM::SLOT_BYTES / 4);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) read_words<LN::KWORDS>(kc[nt], words, nt * LN::KWORDS);
#pragma unroll
            for (int j = 0; j < KT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    read_words<LN::VWORDS>(vc[j][e], words, SM::K_WORDS + (4 * j + e) * LN::VWORDS);
        } else {
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
                load_stream<LN::KWORDS>(kc[nt], hc.k_lane + in_cache(key0 + 8 * nt + g) * hc.ksl);
#pragma unroll
            for (int j = 0; j < KT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    load_stream<LN::VWORDS>(vc[j][e],
                                            hc.v_lane + in_cache(key0 + 16 * j + 2 * t + (e & 1) + 8 * (e >> 1)) * hc.vsl);
        }

        // ---- S = Q K^T, two k16 steps at a time: they share one 16-byte load of a key's 8 scales
        // (and of its 8 minimums), channels 8w .. 8w + 7 of the lane's chunk; with KG1 one load for
        // all the tile's n8 tiles. (All of a tile's scales loaded at its start would stay live through
        // the loop, and those registers spill at this occupancy.)
        float s[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
        int k_group[NT];  // each n8 tile's key's group of tokens, as an offset into ks_row / km_row
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
            k_group[nt] = !QUANT ? 0
                          : (KG1 && nt > 0) ? k_group[0]
                                            : static_cast<int>(divide(in_cache(key0 + 8 * nt + g), group_div)) * hc.ksg;
#pragma unroll
        for (int w = 0; w < DS / 2; ++w) {
            uint4 a[2];
#pragma unroll
            for (int x = 0; x < 2; ++x) a[x] = sq[(2 * w + x) * 32 + lane];
            [[maybe_unused]] unsigned sc[4], mn[4];  // KG1: the tile's one group, loaded once for every n8 tile
            if constexpr (QUANT && KG1) {
                load_cached<4>(sc, hc.ks_row + k_group[0] + 8 * w);
                load_cached<4>(mn, hc.km_row + k_group[0] + 8 * w);
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                if constexpr (QUANT && !KG1) {
                    load_cached<4>(sc, hc.ks_row + k_group[nt] + 8 * w);
                    load_cached<4>(mn, hc.km_row + k_group[nt] + 8 * w);
                }
#pragma unroll
                for (int x = 0; x < 2; ++x) {
                    const int st = 2 * w + x;
                    unsigned bk[2];
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        bk[r] = k_operand<BITS>(kc[nt], st, r);
                        if constexpr (QUANT) bk[r] = hfma2(bk[r], k_pair<BITS>(sc, x, r), k_pair<BITS>(mn, x, r));
                    }
                    const unsigned af[4] = {a[x].x, a[x].y, a[x].z, a[x].w};
                    mma_16816<BF16>(s[nt], af, bk[0], bk[1]);
                }
            }
        }

        // ---- mask keys past the piece and after each row's query (EDGE tiles only) ----------------
        if constexpr (EDGE) {
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (key0 + 8 * nt + 2 * t + (e & 1) >= limit[e >> 1]) s[nt][e] = neg_inf();
        }

        // ---- online softmax (rows g and g + 8; a row's 4 lanes form a quad) -------------------------
        // In log2 units, s * scale_log2: the scale goes into the fma that subtracts the row's maximum,
        // and the maximum is taken of the raw scores (the scale is positive) and scaled once.
        // O is rescaled only when some row of the warp has a new maximum: otherwise alpha is exactly 1
        // for every row (exp2 of 0), and in a long cache most tiles raise no row's maximum.
        unsigned p[NT][2];
        float alpha[2];
        bool grew = false;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float raw = row_max_of<NT>(s, h, neg_inf());
            const float mx = fmaxf(row_max[h], raw * scale_log2);
            grew |= mx > row_max[h];
            const float shift = (mx == neg_inf()) ? 0.f : mx;  // a row that has seen no key yet
            alpha[h] = fast_exp2(row_max[h] - shift);
            const float sum = exp2_row<NT, BF16>(s, h, scale_log2, shift, p);
            row_sum[h] = row_sum[h] * alpha[h] + sum;
            row_max[h] = mx;
        }
        if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
#pragma unroll
                for (int e = 0; e < 4; ++e) o[dt][e] *= alpha[e >> 1];
        }

        // ---- O += P V ------------------------------------------------------------------------------
        [[maybe_unused]] const unsigned v_row0 = 2u * (key0 + 2 * t) * hc.vssl;  // bytes to V's scale row of key key0 + 2t
#pragma unroll
        for (int j = 0; j < KT; ++j) {
            // The keys' scales and minimums of the strip's group(s), paired as the B registers pair keys.
            [[maybe_unused]] unsigned vs[2][VSPAN], vm[2][VSPAN];  // [b0: keys 2t, 2t+1 | b1: keys 2t+8, 2t+9][group]
            if constexpr (QUANT) load_v_scales<EDGE>(vs, vm, hc, in_cache, key0, j, t, v_row0);
            // The m16n8 C layout of S tiles 2j and 2j + 1 is the m16k16 A layout of P.
            const unsigned a[4] = {p[2 * j][0], p[2 * j][1], p[2 * j + 1][0], p[2 * j + 1][1]};
#pragma unroll
            for (int jn = 0; jn < DT; ++jn) {
                unsigned bv[2];
#pragma unroll
                for (int pr = 0; pr < 2; ++pr) {
                    bv[pr] = v_operand<BITS>(vc[j][2 * pr], vc[j][2 * pr + 1], jn);
                    if constexpr (QUANT) {
                        const int x = (VSPAN == 2 && jn >= hc.cut) ? VSPAN - 1 : 0;
                        bv[pr] = hfma2(bv[pr], vs[pr][x], vm[pr][x]);
                    }
                }
                mma_16816<BF16>(o[jn], a, bv[0], bv[1]);
            }
        }
    };
    int tile = warp, it = 0;
    for (; tile < interior; tile += WARPS, ++it) run_tile(Flag<false>(), tile, it);
    for (; tile < n_tiles; tile += WARPS, ++it) run_tile(Flag<true>(), tile, it);

    if constexpr (STAGES > 0) kbench_ptx::cp_async_wait<0>();  // only empty groups can be left

    // ---- the warps' states merged through shared memory ----------------------------------------------
    // Per warp: 16 maxima, 16 sums, 16 rows of OSTRIDE floats of O. O is stored in fragment order
    // (column 8 jn + c for C column c of n8 tile jn, whose channel is c D/8 + jn), so that a warp's
    // float2 stores hit 32 different banks (rows 8 banks apart); the merge reads it in that order.
    __syncthreads();  // every warp is done with the Q fragments and the ring, whose bytes are reused
    float* sm_m = smem;
    float* sm_l = sm_m + WARPS * 16;
    float* sm_o = sm_l + WARPS * 16;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float l = row_sum[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int row = g + 8 * h;
        if (t == 0) {
            sm_m[warp * 16 + row] = row_max[h];
            sm_l[warp * 16 + row] = l;
        }
        float* dst = sm_o + (warp * 16 + row) * SM::OSTRIDE + 2 * t;
#pragma unroll
        for (int jn = 0; jn < DT; ++jn)
            *reinterpret_cast<float2*>(dst + 8 * jn) = make_float2(o[jn][2 * h], o[jn][2 * h + 1]);
    }
    __syncthreads();

    const int rows_here = min(16, rows - rb * 16);
    // sequence x K/V head x row block: its pieces' states are slots program x splits + split
    const long long program = static_cast<long long>(bh) * row_blocks + rb;
    const long long slot = program * splits + split;
    // O was stored in fragment order: column 8 jn + c holds channel c D/8 + jn.
    write_block<D, 16, SM::OSTRIDE, WARPS, BF16>(
        sm_m, sm_l, sm_o, rows_here, [](int stored) { return (stored % 8) * LN::VCH + stored / 8; }, O, part_o, part_m,
        part_l, slot, rb * 16, b, kvh, gqa, nq, o_sb, o_sh, o_sq);
    if (counts != nullptr && last_piece(counts, program, splits))
        merge_pieces<D, WARPS, BF16>(part_o, part_m, part_l, program, splits, rows_here, smem, O, rb * 16, b, kvh, gqa,
                                     nq, o_sb, o_sh, o_sq);
}

// ---- keys as the m16 rows ---------------------------------------------------------------------------
// The same work with the products transposed: S^T = K Q^T and O^T = V^T P^T, the keys (then V's
// channels) the M rows of m16n8k16 and the block's query rows its N = 8 columns. A GQA group of 4
// rows then fills half an n8 tile instead of a quarter of an m16 one: half the mma.sync of the form
// above, O^T 32 fp32 registers a lane instead of 64, and Q's fragments kept in registers (16) instead
// of re-read from shared memory every tile, so that the kernel fits 16 warps an SM (128 registers)
// instead of 12, and more tiles' loads are in flight at once.
//
// Which lane holds what (lane = 4 g + t; m16 tile mt of the keys: keys key0 + 16 mt .. + 15):
//   S^T = K Q^T, k16 step s: A: keys 16 mt + g (a0, a2) and + 8 (a1, a3), channels of k_channel(s, r)
//     as the B registers of the form above (r = 0: a0, a1; r = 1: a2, a3); B: Q^T, query row g at the
//     same channels. C: keys 16 mt + g, + 8 x rows 2t, 2t + 1.
//   O^T += V^T P^T, k16 step j (keys key0 + 16 j ..), m16 tile mi of channels: A: V's channels
//     g D/8 + 2 mi (a0, a2) and + 1 (a1, a3) of the lane's strip, keys 16 j + {2t, 2t+1} (a0, a1) and
//     {2t+8, 2t+9} (a2, a3), v_operand's pairs; B: P^T, keys 16 j + {2t, 2t+1}, {2t+8, 2t+9} x row g,
//     which is S^T's C fragment of m16 tile j moved across the warp by movmatrix.trans (the C layout's
//     8 x 8 blocks, keys x rows, transposed). C: channels g D/8 + 2 mi, + 1 x rows 2t, 2t + 1.
constexpr int KEY_FORM_ROWS = 8;  // query rows of a block: one n8 tile

// An 8 x 8 matrix of 16-bit values in the m8n8 fragment layout (lane 4 g + t: row g, columns 2t, 2t+1),
// transposed: the lane then holds row g of the transpose.
__device__ __forceinline__ unsigned transpose_8x8(unsigned x) {
    unsigned y;
    asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

// A lane's Q^T B fragments in the keys form from its chunk of a query row, `q` (D / 4 contiguous 16-bit
// values from the chunk's first channel; null: a row past the group, zeros): register r of k16 step s is the
// channels k_channel(s, r, 0) and (.., 1) of the chunk. Read as 16-byte vectors where the chunk is 16-byte
// aligned (every layout kbench makes: 4 loads at d = 128 instead of 32 of one value), a value at a time
// elsewhere; int4's pairs {c, c + 4} then come from two words by one prmt.
template <int BITS, int D>
__device__ __forceinline__ void load_q_chunk(unsigned (&qb)[D / 16][2], const unsigned short* q) {
    constexpr int WORDS = D / 8;  // the chunk's values two a word, in channel order
    unsigned w[WORDS];
    if (q == nullptr) {
#pragma unroll
        for (int i = 0; i < WORDS; ++i) w[i] = 0u;
    } else if (reinterpret_cast<unsigned long long>(q) % 16 == 0) {
        load_cached<WORDS>(w, q);
    } else {
#pragma unroll
        for (int i = 0; i < WORDS; ++i) w[i] = unsigned(q[2 * i]) | (unsigned(q[2 * i + 1]) << 16);
    }
#pragma unroll
    for (int s = 0; s < D / 16; ++s)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            if constexpr (BITS == 4) {  // channels 8 (s/2) + 2 (s%2) + r and + 4: half r of words x and x + 2
                const int x = 4 * (s / 2) + s % 2;
                qb[s][r] = r ? prmt<0x7632>(w[x], w[x + 2]) : prmt<0x5410>(w[x], w[x + 2]);
            } else {  // channels 4 s + 2 r and + 1: word 2 s + r
                qb[s][r] = w[2 * s + r];
            }
        }
}

// Asks L2 for the K and V rows of the tile of TN keys from key0 (those before `end`) of a head whose rows
// follow one another (k_head, v_head: its first key's), a 128-byte line a lane, without waiting and without
// registers; VSCALES: the line of those keys' V scales and minimums too (2 bytes a key).
template <int TN, int ROW_BYTES, bool VSCALES>
__device__ __forceinline__ void prefetch_rows(const unsigned char* k_head, const unsigned char* v_head,
                                              const unsigned short* vs_head, const unsigned short* vm_head, int key0,
                                              int end, int lane) {
    constexpr int LINES = TN * ROW_BYTES / 128;  // 128-byte lines of a tile's K rows (and of its V rows)
    static_assert(TN * ROW_BYTES % 128 == 0, "a tile's rows are whole lines");
    const int bytes = (min(key0 + TN, end) - key0) * ROW_BYTES;  // the piece's last tile may be short
#pragma unroll
    for (int i = lane; i < 2 * LINES; i += 32) {
        const int at = (i % LINES) * 128;
        if (at < bytes) prefetch_l2((i < LINES ? k_head : v_head) + static_cast<long long>(key0) * ROW_BYTES + at);
    }
    if constexpr (VSCALES) {
        if (lane == 0) prefetch_l2(vs_head + key0);
        if (lane == 1) prefetch_l2(vm_head + key0);
    }
}

// ---- the rings of tiles in shared memory (PIPE 3: sm_90's bulk copies; PIPE 4: the lanes' cp.async) ----
// PIPE 3 is launched on sm_90 and newer only (the host refuses it elsewhere); on an older arch its
// wrappers trap (BITDECODE_SM90), so that the source still builds there.

// A stage of the ring: the block's round of WARPS tiles (warp w's tile of round r is r WARPS + w, TN keys
// each: the round's keys follow one another), each part as the cache holds it (DENSE): the round's K rows,
// its V rows, (KSCALES: tiles of one group of K's scales each) the rows of K's scales its keys touch (at most
// `k_rows`: (WARPS TN - 1) / group + 2) and as many of minimums, (VFOLD) its keys' V scales and their
// minimums. A bulk copy starts and ends on 16 bytes: V's scales' copy starts at the 16 bytes holding the
// round's first one, 16 bytes more where that is not its first byte (V_SCALE_BYTES each). Offsets in bytes.
template <int BITS, int D, int TN, int WARPS, bool KSCALES, bool VFOLD>
struct RingStage {
    static constexpr int ROWS = WARPS * TN * (D * BITS / 8);
    static constexpr int K_SCALES = 2 * ROWS;
    static constexpr int V_SCALE_BYTES = 2 * WARPS * TN + 16;
    int k_rows, v_scales, bytes;
    __device__ __forceinline__ explicit RingStage(int group)
        : k_rows(KSCALES ? (WARPS * TN - 1) / group + 2 : 0),
          v_scales(K_SCALES + 2 * k_rows * D * 2),
          bytes(v_scales + (VFOLD ? 2 * V_SCALE_BYTES : 0)) {}
};

// A stage of a warp's own ring (PIPE 4): one of its tiles, each part as the cache holds it (DENSE): the
// tile's K rows, its V rows, (KSCALES: a tile of one group of K's scales) the group's row of D scales and
// its row of D minimums, (VFOLD) its keys' V scales and their minimums, each from the 16 bytes holding the
// first (V_SCALE_BYTES each). Each lane copies 16-byte pieces of them. Offsets in bytes, BYTES a multiple of 16.
template <int BITS, int D, int TN, bool KSCALES, bool VFOLD>
struct WarpStage {
    static constexpr int ROWS = TN * (D * BITS / 8);
    static constexpr int K_SCALES = 2 * ROWS;
    static constexpr int V_SCALES = K_SCALES + (KSCALES ? 2 * D * 2 : 0);
    static constexpr int V_SCALE_BYTES = 2 * TN + 16;
    static constexpr int BYTES = V_SCALES + (VFOLD ? 2 * V_SCALE_BYTES : 0);
    static_assert(ROWS % (16 * 32) == 0 && D * 2 / 16 <= 16 && V_SCALE_BYTES <= 16 * 16,
                  "a lane's 16-byte pieces: of the rows whole rounds of the warp, of each row of scales at most one");
};

// Waits until at most `pending` of this thread's cp.async groups are in flight (`pending` 1, 2 or 3: a ring
// of 2, 3 or 4 stages whose next stages are on their way).
__device__ __forceinline__ void warp_ring_wait(int pending) {
    if (pending >= 3) kbench_ptx::cp_async_wait<3>();
    else if (pending == 2) kbench_ptx::cp_async_wait<2>();
    else kbench_ptx::cp_async_wait<1>();
}

// An sm_90 statement as it is there, a trap on an older arch.
#if __CUDA_ARCH__ >= 900
#define BITDECODE_SM90(...) __VA_ARGS__
#else
#define BITDECODE_SM90(...) __trap()
#endif

// Barriers `bars`, `bars` + 8, ... (one a stage, one arrival each: the thread that asks for the copies).
__device__ __forceinline__ void ring_init(unsigned bars, int stages) {
    for (int s = 0; s < stages; ++s) BITDECODE_SM90(kbench_sm90::mbarrier_init(bars + 8 * s, 1));
    BITDECODE_SM90(kbench_sm90::mbarrier_init_fence());
}

// Waits until the copies of a stage's phase of parity `parity` have landed.
__device__ __forceinline__ void ring_wait(unsigned bar, unsigned parity) {
    BITDECODE_SM90(kbench_sm90::mbarrier_wait(bar, parity));
}

// Announces a stage's `bytes` to its barrier `bar` (the one arrival of its phase), before ring_copy asks for them.
__device__ __forceinline__ void ring_expect(unsigned bar, int bytes) {
    BITDECODE_SM90(kbench_sm90::mbarrier_arrive_expect_tx(bar, bytes));
}

// Orders this thread's reads of shared memory (and the other warps', seen through a block-scope atomic
// before it) ahead of the copy engine's writes that follow.
__device__ __forceinline__ void ring_release() { BITDECODE_SM90(kbench_sm90::fence_proxy_async_shared()); }

// Asks the copy engine for `bytes` contiguous bytes from `src` at shared address `dst`, counted on `bar`.
__device__ __forceinline__ void ring_copy(unsigned dst, const void* src, int bytes, unsigned bar) {
    BITDECODE_SM90(kbench_sm90::bulk_load(dst, src, bytes, bar));
}

// 16 warps an SM (128 registers a thread) for int4 codes whose V strip lies in one group; 12 (168)
// otherwise: int8 and 16-bit values (twice and four times the words a lane holds), and a second set of
// V's scales and minimums, spill at 128. PIPE 2 holds two tiles' codes: 12 warps (168) for int4, 8 (up to
// 255) for int8; PIPE 1 (the next tile's K only) keeps the counts without it.
template <int BITS, int VSPAN, int PIPE = 0>
constexpr int KEY_FORM_WARPS_PER_SM = PIPE == 2 ? (BITS == 4 ? 12 : 8) : (BITS == 4 && VSPAN == 1 ? 16 : 12);

// VFOLD: V's groups span the head (group >= D: one scale and minimum a token), and they are applied to
// P instead of to every dequantized V element. A key's row of V is scale · (codes - c) + middle, with c
// the middle code (MIDDLE_CODE) and middle = minimum + c · scale, so
//     sum_k p_k v_k = sum_k (p_k scale_k) (codes_k - c) + (sum_k p_k middle_k)
// the first term an mma of the centred codes (fp16 integers, exact: the magic number's subtraction
// takes c off too) against P scaled key by key (a multiply of each fp32 p before it is rounded to fp16,
// as P is anyway), the second a running sum per row rescaled like the row's sum, added to every channel
// of O once at the end. That takes the fma of every V pair (64 a tile of 32 keys at d = 128) and the
// paired loads of V's scales out of the loop, for 4 fmas, 8 fp32 multiplies and 8 fmas on the 4 keys'
// P values a lane holds. Centred, the products are as large as the values' spread about their middle:
// with the codes themselves (middle = minimum) the accumulators would hold the minimums' sum and the
// codes' sum, large and of opposite signs, whose rounding grows with the tiles a warp adds up.
// KFOLD: K's scales folded into the queries, for a tile of one group of K's scales (KG1). A key's channel c
// is scale_c · code + minimum_c, and the codes come out of the bit tricks as raw fp16 numbers R_c + code
// (k_raw: R 1024, or 64 for int4's high nibbles), so
//     s = sum_c q_c k_c = sum_c q'_c raw_c - sum_c R_c q'_c + sum_c q_c minimum_c,   q'_c = q_c scale_c
// the first term the mma of the raw numbers against Q' (Qᵀ's B registers times the scales, one mul.rn.f16x2
// a register, rounded to fp16 as the dequantized value is), the other two the same for every key of the
// tile: two more mma a k16 step, A the offsets (constants) against Q' and the minimums against Q, into
// one accumulator added to every key's scores. That takes the sub to the code and the scale's fma
// of every K register (64 each for an int4 tile of 32 keys at d = 128) out of the loop, for 16 mul.rn.f16x2
// and 16 mma. The raw terms cancel exactly (the same Q' on both sides, products exact in fp32), leaving
// the fp32 sums' rounding of terms R_c q'_c. |q_c · scale_c| must be below fp16's largest, 65504.
// VRAW (with VFOLD): V's codes go into O^T += V^T P^T as raw fp16 numbers too (v_raw), and one more mma
// a k16 step and m16 tile of channels, A the offsets plus the middle code (negated) against the same Pᵀ,
// takes them off in the same accumulator: sum_k p'_k (raw_k - offset - c) = sum_k p'_k (code_k - c), the
// centred product of VFOLD without the sub of every V register (64 an int4 tile of 32 keys at
// d = 128) for 16 mma. Within each k16 step the accumulator holds the offsets' terms, about 1032 times
// the step's sum of P', which cancel before the next step; its rounding is that of those terms.
// DENSE: a token's K and V rows follow one another (the codes' token stride is the row, D BITS / 8
// bytes; with VFOLD, V's scales and minimums one element a token). The loop's tiles before the
// piece's edge then address each row as the tile's first row plus a constant, which ptxas folds into
// the load instruction, instead of a multiply and a 64-bit add of a run-time stride every row.
// PIPE: how a tile's codes reach registers. 0: loaded as the warp starts the tile; 1: K's loaded during the
// warp's tile before (after its products with K); 2: V's too; 3 (DENSE, sm_90): the tiles without masks
// through a ring of `ring_depth` stages in shared memory, each a round of the block's tiles filled by the
// copy engine (RingStage: one bulk copy of each part), asked for `ring_depth` rounds ahead without
// registers; 4 (DENSE): the same tiles through a ring of `ring_depth` stages a warp (WarpStage), each one
// of the warp's tiles, filled by its own lanes' 16-byte cp.async `ring_depth` tiles ahead, so that no warp
// waits for another; with 3 and 4 the tiles with masks load as with 0.
template <int BITS, bool BF16, int D, int TN, int WARPS, int VSPAN, bool KG1, bool VFOLD, bool KFOLD, bool VRAW,
          bool DENSE, int PIPE>
__global__ void __launch_bounds__(WARPS * 32, WARPS <= KEY_FORM_WARPS_PER_SM<BITS, VSPAN, PIPE> ? KEY_FORM_WARPS_PER_SM<BITS, VSPAN, PIPE> / WARPS : 1)
bitdecode_partial_keys(BITDECODE_PARTIAL_PARAMS) {
    using LN = Lanes<BITS, D>;
    constexpr bool QUANT = BITS < 16;
    constexpr int MT = TN / 16;  // m16 tiles of keys a tile (and k16 steps of O^T += V^T P^T)
    constexpr int DS = D / 16;   // k16 steps of S^T = K Q^T
    constexpr int MI = D / 16;   // m16 tiles of O^T's channels
    constexpr int ROWS = KEY_FORM_ROWS;
    constexpr int OSTRIDE = D + 4;  // floats a row of a warp's O in the merge (padded)
    static_assert(TN % 16 == 0 && D % 64 == 0, "tiles of 16 keys, d a multiple of 64");
    static_assert(BITS == 4 || BITS == 8 || BITS == 16, "4- or 8-bit codes, or 16-bit values");
    static_assert(!QUANT || !BF16, "a quantized cache's queries and output are fp16");
    static_assert(!VFOLD || (QUANT && VSPAN == 1), "V's scales fold into P for a quantized cache, one group a token");
    static_assert(!KFOLD || (QUANT && KG1), "K's scales fold into Q for a quantized cache, one group a tile");
    static_assert(!VRAW || VFOLD, "V's raw codes with V's scales on P");
    static_assert(PIPE < 3 || DENSE, "a ring copies a tile's rows as one run of bytes: DENSE");
    constexpr bool BLOCK_RING = PIPE == 3;  // a ring of `ring_depth` rounds of the block's tiles in shared memory
    constexpr bool WARP_RING = PIPE == 4;   // a ring of `ring_depth` of the warp's own tiles in shared memory
    constexpr bool RING = BLOCK_RING || WARP_RING;
    constexpr int AHEAD = RING ? 0 : PIPE;  // the next tile's codes in registers: 1 K's, 2 K's and V's

    extern __shared__ __align__(16) float smem[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;
    const int rb = blockIdx.x % row_blocks, split = blockIdx.x / row_blocks;
    const int bh = blockIdx.y, b = bh / hkv, kvh = bh % hkv;
    const int rows = gqa * nq;
    const int start = split * keys_per_split;
    const int end = min(start + keys_per_split, L);

    constexpr int ROW_BYTES = D * BITS / 8;
    const int n_tiles = (end - start + TN - 1) / TN;
    // The head's first key (DENSE: rows one after another) and (VFOLD) its V scales and minimums. The last two
    // are HeadCache's vs_row and vm_row, taken here before hc exists: hc built this early, ptxas (sm_90, int4
    // in groups of 128 at d = 128) spills 112 bytes a thread in the loop instead of 4.
    const unsigned char* k_head = K + b * k_sb + kvh * k_sh;
    const unsigned char* v_head = V + b * v_sb + kvh * v_sh;
    const unsigned short* vs_head = VS + b * vs_sb + kvh * vs_sh;
    const unsigned short* vm_head = VM + b * vs_sb + kvh * vs_sh;
    // A tile of the warp's, `ahead` tiles of WARPS from its first (nothing past the piece), asked of L2.
    auto prefetch_tile = [&](int ahead) {
        if (ahead < n_tiles)
            prefetch_rows<TN, ROW_BYTES, VFOLD>(k_head, v_head, vs_head, vm_head, start + ahead * TN, end, lane);
    };
    // lead > 0 (DENSE): the warp's first `lead` tiles asked of L2 before Q is read, so that their bytes are on
    // their way while Q's arrive (the first tile's loads wait on Q's addresses and values otherwise).
    if (DENSE) {
#pragma unroll 1
        for (int i = 0; i < lead; ++i) prefetch_tile(warp + i * WARPS);
    }
    const Divisor group_div{group_magic, group_shift};  // key / group, K's group of tokens
    // BLOCK_RING: `ring_depth` stages in the block's first bytes of shared memory (the merge reuses them after a
    // barrier), then a barrier and a count a stage past those bytes and the merge's. Stage s % ring_depth holds
    // round s of the block's tiles without masks (ring_round). Thread 0 asks the copy engine for the first
    // `ring_depth` rounds before Q is read; as each warp finishes its tile of a round its lane 0 counts it in
    // (ring_counts), and the last of the block's warps asks for round + ring_depth into the same stage. The
    // rounds take the stages in turn (ring_slot), each stage's phases alternating parity (ring_parity).
    using RS = RingStage<BITS, D, TN, WARPS, QUANT && KG1, VFOLD>;
    constexpr int MERGE_BYTES = WARPS * KEY_FORM_ROWS * (2 + D + 4) * 4;  // sm_m, sm_l, sm_o below
    [[maybe_unused]] const RS stage_of{group};
    [[maybe_unused]] const unsigned char* ring_stages = reinterpret_cast<const unsigned char*>(smem);
    [[maybe_unused]] const int ring_end = (max(ring_depth * stage_of.bytes, MERGE_BYTES) + 7) & ~7;
    [[maybe_unused]] const unsigned ring_bars = static_cast<unsigned>(__cvta_generic_to_shared(smem)) + ring_end;
    [[maybe_unused]] int* ring_counts =
        reinterpret_cast<int*>(reinterpret_cast<char*>(smem) + ring_end + 8 * ring_depth);
    [[maybe_unused]] int ring_slot = 0, ring_round = 0;
    [[maybe_unused]] unsigned ring_parity = 0;
    // VFOLD: the V scales' and minimums' 16-byte lines in the stage start that many values before the head's
    // (and every round's: a round is 64 bytes of them or more) first one.
    [[maybe_unused]] const int vs_skew = static_cast<int>(reinterpret_cast<unsigned long long>(vs_head) % 16) / 2;
    [[maybe_unused]] const int vm_skew = static_cast<int>(reinterpret_cast<unsigned long long>(vm_head) % 16) / 2;
    // `interior`: the piece's tiles without masks (tiles_without_masks), which the rings carry
    [[maybe_unused]] auto ring_ask = [&](int slot, int round, int interior) {  // one thread
        const int keys = min(WARPS, interior - round * WARPS) * TN;  // the last round may be short
        const long long key0 = start + round * WARPS * TN;
        const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(ring_stages + slot * stage_of.bytes));
        const unsigned bar = ring_bars + 8 * slot;
        int k_scale_bytes = 0;
        long long k_group0 = 0;
        if constexpr (QUANT && KG1) {  // the rows of K's scales (D each, one after another) the round's keys touch
            k_group0 = divide(static_cast<unsigned>(key0), group_div);
            k_scale_bytes = (divide(static_cast<unsigned>(key0 + keys - 1), group_div) - k_group0 + 1) * D * 2;
        }
        const int vs_bytes = 2 * keys + (vs_skew ? 16 : 0), vm_bytes = 2 * keys + (vm_skew ? 16 : 0);
        ring_expect(bar, 2 * keys * ROW_BYTES + 2 * k_scale_bytes + (VFOLD ? vs_bytes + vm_bytes : 0));
        ring_copy(dst, k_head + key0 * ROW_BYTES, keys * ROW_BYTES, bar);
        ring_copy(dst + RS::ROWS, v_head + key0 * ROW_BYTES, keys * ROW_BYTES, bar);
        if constexpr (QUANT && KG1) {
            const long long at = b * ks_sb + kvh * ks_sh + k_group0 * D;
            ring_copy(dst + RS::K_SCALES, KS + at, k_scale_bytes, bar);
            ring_copy(dst + RS::K_SCALES + stage_of.k_rows * D * 2, KM + at, k_scale_bytes, bar);
        }
        if constexpr (VFOLD) {
            ring_copy(dst + stage_of.v_scales, vs_head + key0 - vs_skew, vs_bytes, bar);
            ring_copy(dst + stage_of.v_scales + RS::V_SCALE_BYTES, vm_head + key0 - vm_skew, vm_bytes, bar);
        }
    };
    if constexpr (BLOCK_RING) {
        if (threadIdx.x == 0) {
            const int interior = tiles_without_masks<TN>(edge_masks, start, end, L, nq);
            ring_init(ring_bars, ring_depth);
            for (int s = 0; s < ring_depth; ++s) ring_counts[s] = 0;
#pragma unroll 1
            for (int r = 0; r < ring_depth && r * WARPS < interior; ++r) ring_ask(r, r, interior);
        }
        __syncthreads();
    }
    // WARP_RING: `ring_depth` stages a warp (warp w's stage s at (s WARPS + w) WarpStage bytes; the merge reuses
    // them after a barrier). The warp's i-th tile without masks takes stage i % ring_depth (ring_slot); its lanes
    // copy the first `ring_depth` tiles before Q is read, and as the warp finishes a tile the tile `ring_depth`
    // on into the same stage. One cp.async group a tile (empty past the tiles without masks), so that a tile's
    // group is in once all but the `ring_depth` - 1 after it are (warp_ring_wait).
    using WS = WarpStage<BITS, D, TN, QUANT && KG1, VFOLD>;
    [[maybe_unused]] auto warp_stage = [&](int slot) {
        return reinterpret_cast<const unsigned char*>(smem) + (slot * WARPS + warp) * WS::BYTES;
    };
    // ks_head, km_head: the head's first row of K scales and of minimums (in the loop, from HeadCache's lane
    // pointers, which it holds anyway: fewer registers held across the loop).
    [[maybe_unused]] auto warp_fill = [&](int slot, int tile, int interior, const unsigned short* ks_head,
                                          const unsigned short* km_head, int ks_group) {  // every lane of the warp
        if (tile < interior) {
            const long long key0 = start + tile * TN;
            const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(warp_stage(slot))) + 16 * lane;
            const unsigned char* k_rows = k_head + key0 * ROW_BYTES + 16 * lane;
            const unsigned char* v_rows = v_head + key0 * ROW_BYTES + 16 * lane;
#pragma unroll
            for (int at = 0; at < WS::ROWS; at += 16 * 32) {  // lane l: the rows' 16-byte pieces l, l + 32, ...
                kbench_ptx::cp_async_16(dst + at, k_rows + at, 16);
                kbench_ptx::cp_async_16(dst + WS::ROWS + at, v_rows + at, 16);
            }
            if constexpr (QUANT && KG1) {  // the tile's group's row of K scales (first lanes) and of minimums
                constexpr int PIECES = D * 2 / 16;
                const int at = divide(static_cast<unsigned>(key0), group_div) * ks_group + 8 * (lane % PIECES);
                if (lane < 2 * PIECES)
                    kbench_ptx::cp_async_16(dst + WS::K_SCALES + (lane >= PIECES ? D * 2 - 16 * PIECES : 0),
                                            (lane < PIECES ? ks_head : km_head) + at, 16);
            }
            if constexpr (VFOLD) {  // the keys' V scales (lanes 0-15) and minimums (16-31), from their 16-byte lines
                // (a line's values past the cache's last are not read: the copy fills their bytes with zeros)
                const int piece = lane % 16, skew = lane < 16 ? vs_skew : vm_skew;
                const int first = static_cast<int>(key0) - skew + 8 * piece;  // the piece's first value
                if (16 * piece < 2 * (TN + skew))
                    kbench_ptx::cp_async_16(dst + WS::V_SCALES + (lane >= 16 ? WS::V_SCALE_BYTES - 16 * 16 : 0),
                                            (lane < 16 ? vs_head : vm_head) + first, 2 * min(8, L - first));
            }
        }
        kbench_ptx::cp_async_commit();
    };
    if constexpr (WARP_RING) {
        const int interior = tiles_without_masks<TN>(edge_masks, start, end, L, nq);
#pragma unroll 1
        for (int r = 0; r < ring_depth; ++r)
            warp_fill(r, warp + r * WARPS, interior, KS + b * ks_sb + kvh * ks_sh, KM + b * ks_sb + kvh * ks_sh,
                      static_cast<int>(ks_sg));
    }
    // ---- Q^T as B fragments, in registers: query row rb 8 + g (zero past the group), the channels of
    // k_channel in the lane's chunk t.
    unsigned qb[DS][2];
    {
        const int row = rb * ROWS + g;
        load_q_chunk<BITS, D>(qb, row < rows ? Q + group_row(b, kvh, gqa, nq, row, q_sb, q_sh, q_sq) + t * LN::KCH
                                             : nullptr);
    }

    // Per row of this lane (2t, 2t + 1): the first key it may not see.
    int limit[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) limit[e] = first_hidden_key(rb * ROWS + 2 * t + e, rows, end, L, nq);

    float o[MI][4];
    float row_max[2] = {neg_inf(), neg_inf()};
    float row_sum[2] = {0.f, 0.f};  // this lane's part of each row's sum; the 8 lanes of a t add them at the end
    [[maybe_unused]] float row_bias[2] = {0.f, 0.f};  // VFOLD: this lane's part of each row's sum of P x middle value
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mi][e] = 0.f;

    const HeadCache<BITS, D> hc(K, V, KS, KM, VS, VM, b, kvh, g, t, group, k_sb, k_sh, k_sl, v_sb, v_sh, v_sl, ks_sb,
                                ks_sh, ks_sg, vs_sb, vs_sh, vs_sl);
    // Worked out here and again in the rings' set-up above, not once at the top: held from the top across Q's
    // loads, ptxas (sm_90, int4 in groups of 128 at d = 128) stores 92 bytes of spills a thread instead of 4 and
    // runs 29 more instructions a tile.
    const int interior = tiles_without_masks<TN>(edge_masks, start, end, L, nq);

    // A tile's codes in registers, and (VFOLD) V's scales and minimums of the keys whose P this lane holds.
    unsigned kc[MT][2][LN::KWORDS];  // keys 16 mt + g (0) and + 8 (1)
    unsigned vc[MT][4][LN::VWORDS];  // keys 16 j + 2t, 2t+1, 2t+8, 2t+9
    [[maybe_unused]] unsigned short v_scale[MT][2], v_min[MT][2];  // keys 16 mt + g, + 8
    // K's codes of a tile. Rows from the tile's first (DENSE interior tiles: constant offsets), or each on
    // its own, clamped to the cache (EDGE).
    auto load_k = [&](auto edge, int tile) {
        constexpr bool EDGE = decltype(edge)::value, FIXED_ROWS = DENSE && !EDGE;
        auto in_cache = [&](int key) { return EDGE ? min(key, L - 1) : key; };
        const int key0 = start + tile * TN;
        const unsigned char* k_first = hc.k_lane + static_cast<long long>(key0 + g) * ROW_BYTES;  // key key0 + g
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                load_stream<LN::KWORDS>(kc[mt][h], FIXED_ROWS ? k_first + (16 * mt + 8 * h) * ROW_BYTES
                                                              : hc.k_lane + in_cache(key0 + 16 * mt + 8 * h + g) * hc.ksl);
    };
    // V's codes of a tile, and (VFOLD) V's scales and minimums of its keys.
    auto load_v = [&](auto edge, int tile) {
        constexpr bool EDGE = decltype(edge)::value, FIXED_ROWS = DENSE && !EDGE;
        auto in_cache = [&](int key) { return EDGE ? min(key, L - 1) : key; };
        const int key0 = start + tile * TN;
        const unsigned char* v_first = hc.v_lane + static_cast<long long>(key0 + 2 * t) * ROW_BYTES;  // key0 + 2t
#pragma unroll
        for (int j = 0; j < MT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int key = 16 * j + (e & 1) + 8 * (e >> 1);  // past key0 + 2t
                load_stream<LN::VWORDS>(vc[j][e], FIXED_ROWS ? v_first + key * ROW_BYTES
                                                             : hc.v_lane + in_cache(key0 + 2 * t + key) * hc.vsl);
            }
        if constexpr (VFOLD) {
            const unsigned first = 2u * (key0 + g);  // bytes to key key0 + g's (DENSE: one element a key)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const unsigned at = FIXED_ROWS ? first + 2u * (16 * mt + 8 * h)
                                                   : 2u * in_cache(key0 + 16 * mt + 8 * h + g) * hc.vssl;
                    v_scale[mt][h] = load_half(hc.vs_row, at);
                    v_min[mt][h] = load_half(hc.vm_row, at);
                }
        }
    };
    // RING: a tile's codes (and V's scales and minimums) from shared memory, where the lane reads the same bytes
    // load_k and load_v read from the cache: the tile's first K row, first V row, (VFOLD) first V scale and
    // first V minimum there.
    [[maybe_unused]] auto read_stage = [&](const unsigned char* k_tile, const unsigned char* v_tile,
                                           const unsigned short* scales, const unsigned short* minimums) {
        const unsigned char* k_rows = k_tile + t * (LN::KWORDS * 4);
        const unsigned char* v_rows = v_tile + g * (LN::VWORDS * 4);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) load_shared(kc[mt][h], k_rows + (16 * mt + 8 * h + g) * ROW_BYTES);
#pragma unroll
        for (int j = 0; j < MT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                load_shared(vc[j][e], v_rows + (16 * j + (e & 1) + 8 * (e >> 1) + 2 * t) * ROW_BYTES);
        if constexpr (VFOLD) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    v_scale[mt][h] = scales[16 * mt + 8 * h + g];
                    v_min[mt][h] = minimums[16 * mt + 8 * h + g];
                }
        }
    };
    // AHEAD (1: K's codes, 2: K's and V's): the warp's next tile (tile + WARPS), loaded by `load` (load_k or
    // load_v) during this one. A tile of the loop without masks has its next one there too (the loop stops
    // a round early), whose rows it loads from constants (DENSE); a masked tile loads the next one's rows
    // clamped to the cache, or nothing past the piece.
    auto load_next = [&](auto load, auto edge, int next) {
        if (!decltype(edge)::value || next < n_tiles) load(edge, next);
    };

    auto run_tile = [&](auto edge, int tile) {
        constexpr bool EDGE = decltype(edge)::value;
        auto in_cache = [&](int key) { return EDGE ? min(key, L - 1) : key; };
        const int key0 = start + tile * TN;
        // prefetch > 0 (DENSE): the tile `prefetch` ahead asked of L2, so that its loads meet L2's latency instead
        // of HBM's, at no cost in registers (AHEAD holds the next tile's codes in registers instead)
        if (DENSE && prefetch > 0) prefetch_tile(tile + prefetch * WARPS);
        // the tile's codes as it starts: from its stage of the ring (RING, the tiles without masks), or those
        // AHEAD does not load during the tile before
        if constexpr (BLOCK_RING && !EDGE) {
            ring_wait(ring_bars + 8 * ring_slot, ring_parity);
            const unsigned char* stage = ring_stages + ring_slot * stage_of.bytes;
            read_stage(stage + warp * TN * ROW_BYTES, stage + RS::ROWS + warp * TN * ROW_BYTES,
                       reinterpret_cast<const unsigned short*>(stage + stage_of.v_scales) + vs_skew + warp * TN,
                       reinterpret_cast<const unsigned short*>(stage + stage_of.v_scales + RS::V_SCALE_BYTES) + vm_skew
                           + warp * TN);
        } else if constexpr (WARP_RING && !EDGE) {
            warp_ring_wait(ring_depth - 1);  // this tile's copies are in (this lane's), the next ring_depth - 1 on their way
            __syncwarp();                    // and the other lanes'
            const unsigned char* stage = warp_stage(ring_slot);
            read_stage(stage, stage + WS::ROWS, reinterpret_cast<const unsigned short*>(stage + WS::V_SCALES) + vs_skew,
                       reinterpret_cast<const unsigned short*>(stage + WS::V_SCALES + WS::V_SCALE_BYTES) + vm_skew);
        } else {
            if constexpr (AHEAD < 1) load_k(edge, tile);
            if constexpr (AHEAD < 2) load_v(edge, tile);
        }

        // ---- S^T = K Q^T ------------------------------------------------------------------------------
        float s[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mt][e] = 0.f;
        int k_group[MT][2];  // each A row's key's group of tokens, as an offset into ks_row / km_row
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                k_group[mt][h] = !QUANT ? 0
                                 : (KG1 && (mt > 0 || h > 0)) ? k_group[0][0]
                                 : static_cast<int>(divide(in_cache(key0 + 16 * mt + 8 * h + g), group_div)) * hc.ksg;
        [[maybe_unused]] float k_offsets[4] = {0.f, 0.f, 0.f, 0.f};  // KFOLD: the tile's keys' common terms, C layout
#pragma unroll
        for (int w = 0; w < DS / 2; ++w) {
            [[maybe_unused]] unsigned sc[2][4], mn[2][4];  // [key g | key g + 8]: channels 8w .. 8w + 7 of the chunk
            if constexpr (QUANT && KG1 && RING && !EDGE) {  // the lane's channels of the stage's K scales
                // the tile's group's row of scales (WARP_RING: the stage's one row; BLOCK_RING: of the round's
                // rows), its row of minimums that many rows on
                const unsigned char* row;
                int rows;
                if constexpr (WARP_RING) {
                    row = warp_stage(ring_slot) + WS::K_SCALES, rows = 1;
                } else {
                    row = ring_stages + ring_slot * stage_of.bytes + RS::K_SCALES
                          + (divide(static_cast<unsigned>(key0), group_div)
                             - divide(static_cast<unsigned>(start + ring_round * WARPS * TN), group_div)) * (D * 2);
                    rows = stage_of.k_rows;
                }
                const unsigned char* at = row + t * (LN::KCH * 2) + 16 * w;
                load_shared(sc[0], at);
                load_shared(mn[0], at + rows * D * 2);
            } else if constexpr (QUANT && KG1) {
                load_cached<4>(sc[0], hc.ks_row + k_group[0][0] + 8 * w);
                load_cached<4>(mn[0], hc.km_row + k_group[0][0] + 8 * w);
            }
            if constexpr (KFOLD) {
#pragma unroll
                for (int x = 0; x < 2; ++x) {
                    const int st = 2 * w + x;
                    unsigned qs[2], minimums[4], offsets[4];  // Q' of the step; A of its two common terms
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        qs[r] = hmul2(qb[st][r], k_pair<BITS>(sc[0], x, r));
                        minimums[2 * r] = minimums[2 * r + 1] = k_pair<BITS>(mn[0], x, r);
                        offsets[2 * r] = offsets[2 * r + 1] = raw_offset<BITS>(r) ^ SIGNS;
                    }
                    mma_16816<BF16>(k_offsets, minimums, qb[st][0], qb[st][1]);
                    mma_16816<BF16>(k_offsets, offsets, qs[0], qs[1]);
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        unsigned a[4];
#pragma unroll
                        for (int r = 0; r < 2; ++r)
#pragma unroll
                            for (int h = 0; h < 2; ++h) a[2 * r + h] = k_raw<BITS>(kc[mt][h], st, r);
                        mma_16816<BF16>(s[mt], a, qs[0], qs[1]);
                    }
                }
            } else {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    if constexpr (QUANT && !KG1) {
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            load_cached<4>(sc[h], hc.ks_row + k_group[mt][h] + 8 * w);
                            load_cached<4>(mn[h], hc.km_row + k_group[mt][h] + 8 * w);
                        }
                    }
#pragma unroll
                    for (int x = 0; x < 2; ++x) {
                        const int st = 2 * w + x;
                        unsigned a[4];
#pragma unroll
                        for (int r = 0; r < 2; ++r)
#pragma unroll
                            for (int h = 0; h < 2; ++h) {
                                unsigned reg = k_operand<BITS>(kc[mt][h], st, r);
                                if constexpr (QUANT) {
                                    const int hs = KG1 ? 0 : h;
                                    reg = hfma2(reg, k_pair<BITS>(sc[hs], x, r), k_pair<BITS>(mn[hs], x, r));
                                }
                                a[2 * r + h] = reg;  // a0: key g, a1: key g + 8 (r = 0); a2, a3 (r = 1)
                            }
                        mma_16816<BF16>(s[mt], a, qb[st][0], qb[st][1]);
                    }
                }
            }
        }

        if constexpr (KFOLD) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[mt][e] += k_offsets[e];
        }
        if constexpr (EDGE) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (key0 + 16 * mt + g + 8 * (e >> 1) >= limit[e & 1]) s[mt][e] = neg_inf();
        }
        if constexpr (AHEAD >= 1) load_next(load_k, edge, tile + WARPS);  // K's registers are free until the next tile

        // ---- online softmax: row 2t + e is column e of the lane's C registers, over keys g, g + 8 of
        // every m16 tile; the 8 lanes of one t (lanes t, t + 4, ..., t + 28) hold the tile's 32 keys.
        float alpha[2], shift[2];
        bool grew = false;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            float raw = neg_inf();
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) raw = fmaxf(raw, fmaxf(s[mt][e], s[mt][2 + e]));
            raw = fmaxf(raw, __shfl_xor_sync(0xffffffffu, raw, 4));
            raw = fmaxf(raw, __shfl_xor_sync(0xffffffffu, raw, 8));
            raw = fmaxf(raw, __shfl_xor_sync(0xffffffffu, raw, 16));
            const float mx = fmaxf(row_max[e], raw * scale_log2);
            grew |= mx > row_max[e];
            shift[e] = (mx == neg_inf()) ? 0.f : mx;
            alpha[e] = fast_exp2(row_max[e] - shift[e]);
            row_max[e] = mx;
        }
        unsigned pb[MT][2];  // P^T's B registers of k16 step j: keys 16 j + {2t, 2t+1} (0), {2t+8, 2t+9} (1)
        float sum[2] = {0.f, 0.f};
        [[maybe_unused]] float bias[2] = {0.f, 0.f};
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float p0 = fast_exp2(fmaf(s[mt][2 * h], scale_log2, -shift[0]));
                float p1 = fast_exp2(fmaf(s[mt][2 * h + 1], scale_log2, -shift[1]));
                sum[0] += p0, sum[1] += p1;
                if constexpr (VFOLD) {  // the key's middle value into the rows' sums, its scale into P
                    const float scale = half_to_float(v_scale[mt][h]);
                    const float middle = fmaf(float(MIDDLE_CODE<BITS>), scale, half_to_float(v_min[mt][h]));
                    bias[0] = fmaf(p0, middle, bias[0]), bias[1] = fmaf(p1, middle, bias[1]);
                    p0 *= scale, p1 *= scale;
                }
                pb[mt][h] = transpose_8x8(pack2<BF16>(p0, p1));  // key 16 mt + 8 h + g x rows 2t, 2t+1 -> keys x row g
            }
#pragma unroll
        for (int e = 0; e < 2; ++e) row_sum[e] = row_sum[e] * alpha[e] + sum[e];
        if constexpr (VFOLD) {
#pragma unroll
            for (int e = 0; e < 2; ++e) row_bias[e] = row_bias[e] * alpha[e] + bias[e];
        }
        if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int e = 0; e < 4; ++e) o[mi][e] *= alpha[e & 1];
        }

        // ---- O^T += V^T P^T ---------------------------------------------------------------------------
        [[maybe_unused]] const unsigned v_row0 = 2u * (key0 + 2 * t) * hc.vssl;
#pragma unroll
        for (int j = 0; j < MT; ++j) {
            [[maybe_unused]] unsigned vs[2][VSPAN], vm[2][VSPAN];  // [keys 2t, 2t+1 | 2t+8, 2t+9][group]
            if constexpr (QUANT && !VFOLD) load_v_scales<EDGE>(vs, vm, hc, in_cache, key0, j, t, v_row0);
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
                unsigned a[4];
#pragma unroll
                for (int pr = 0; pr < 2; ++pr)
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const int jn = 2 * mi + c;  // the channel of the lane's strip
                        unsigned reg;
                        if constexpr (VRAW) reg = v_raw<BITS>(vc[j][2 * pr], vc[j][2 * pr + 1], jn);
                        else reg = v_operand<BITS, VFOLD>(vc[j][2 * pr], vc[j][2 * pr + 1], jn);
                        if constexpr (QUANT && !VFOLD) {
                            const int x = (VSPAN == 2 && jn >= hc.cut) ? VSPAN - 1 : 0;
                            reg = hfma2(reg, vs[pr][x], vm[pr][x]);
                        }
                        a[2 * pr + c] = reg;  // a0: channel 2 mi, a1: 2 mi + 1 (keys 2t, 2t+1); a2, a3 (2t+8, 2t+9)
                    }
                if constexpr (VRAW) {  // the step's offsets and middle code off the channels' rows first
                    unsigned offsets[4];
#pragma unroll
                    for (int pr = 0; pr < 2; ++pr)
#pragma unroll
                        for (int c = 0; c < 2; ++c) offsets[2 * pr + c] = raw_offset<BITS, true>(c) ^ SIGNS;
                    mma_16816<BF16>(o[mi], offsets, pb[j][0], pb[j][1]);
                }
                mma_16816<BF16>(o[mi], a, pb[j][0], pb[j][1]);
            }
        }
        if constexpr (AHEAD == 2) load_next(load_v, edge, tile + WARPS);  // and V's (with its scales) after its products
        if constexpr (WARP_RING && !EDGE) {  // the stage's bytes are in registers and used: the tile ring_depth on
            __syncwarp();                     // into it, once every lane is done with it
            warp_fill(ring_slot, tile + ring_depth * WARPS, interior, hc.ks_row - t * LN::KCH, hc.km_row - t * LN::KCH,
                      hc.ksg);
            if (++ring_slot == ring_depth) ring_slot = 0;
        }
        if constexpr (BLOCK_RING && !EDGE) {  // the warp's bytes of the stage are in registers and used: counted in
            __syncwarp();
            if (lane == 0) {
                __threadfence_block();
                const bool last = atomicAdd(ring_counts + ring_slot, 1) % WARPS == WARPS - 1;
                if (last && (ring_round + ring_depth) * WARPS < interior) {  // every warp is done with the stage
                    ring_release();
                    ring_ask(ring_slot, ring_round + ring_depth, interior);
                }
            }
            ++ring_round;
            if (++ring_slot == ring_depth) ring_slot = 0, ring_parity ^= 1u;
        }
    };
    int tile = warp;
    if (DENSE && prefetch > 0) {
        for (int i = 1; i < prefetch; ++i) prefetch_tile(tile + i * WARPS);  // the loop asks from `prefetch` on
    }
    // AHEAD: the loop without masks stops a round early, so that each of its tiles' next one is in it too.
    const int unmasked = AHEAD ? interior - WARPS : interior;
    if constexpr (AHEAD) {  // the first tile's codes that AHEAD loads ahead; each tile then loads the next one's
        if (tile < unmasked) {
            load_k(Flag<false>(), tile);
            if constexpr (AHEAD == 2) load_v(Flag<false>(), tile);
        } else if (tile < n_tiles) {
            load_k(Flag<true>(), tile);
            if constexpr (AHEAD == 2) load_v(Flag<true>(), tile);
        }
    }
    for (; tile < unmasked; tile += WARPS) run_tile(Flag<false>(), tile);
    for (; tile < n_tiles; tile += WARPS) run_tile(Flag<true>(), tile);

    // VFOLD: each row's sum of P x middle value over the warp's keys (the 8 lanes of a t), added to every channel
    if constexpr (VFOLD) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            row_bias[e] += __shfl_xor_sync(0xffffffffu, row_bias[e], 4);
            row_bias[e] += __shfl_xor_sync(0xffffffffu, row_bias[e], 8);
            row_bias[e] += __shfl_xor_sync(0xffffffffu, row_bias[e], 16);
        }
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[mi][e] += row_bias[e & 1];
    }

    // ---- the warps' states merged through shared memory: per warp 8 maxima, 8 sums, 8 rows of O ------
    if constexpr (WARP_RING) kbench_ptx::cp_async_wait<0>();  // only empty groups are left: none in flight
    if constexpr (RING) __syncthreads();  // every warp done with the ring's stages, whose bytes these are
    float* sm_m = smem;
    float* sm_l = sm_m + WARPS * ROWS;
    float* sm_o = sm_l + WARPS * ROWS;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        float l = row_sum[e];
        l += __shfl_xor_sync(0xffffffffu, l, 4);
        l += __shfl_xor_sync(0xffffffffu, l, 8);
        l += __shfl_xor_sync(0xffffffffu, l, 16);
        const int row = 2 * t + e;
        if (g == 0) {
            sm_m[warp * ROWS + row] = row_max[e];
            sm_l[warp * ROWS + row] = l;
        }
        float* dst = sm_o + (warp * ROWS + row) * OSTRIDE + g * LN::VCH;
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
            *reinterpret_cast<float2*>(dst + 2 * mi) = make_float2(o[mi][e], o[mi][2 + e]);
    }
    __syncthreads();

    const int rows_here = min(ROWS, rows - rb * ROWS);
    // sequence x K/V head x row block: its pieces' states are slots program x splits + split
    const long long program = static_cast<long long>(bh) * row_blocks + rb;
    const long long slot = program * splits + split;
    write_block<D, ROWS, OSTRIDE, WARPS, BF16>(sm_m, sm_l, sm_o, rows_here, [](int c) { return c; }, O, part_o, part_m,
                                               part_l, slot, rb * ROWS, b, kvh, gqa, nq, o_sb, o_sh, o_sq);
    if (counts != nullptr && last_piece(counts, program, splits))
        merge_pieces<D, WARPS, BF16>(part_o, part_m, part_l, program, splits, rows_here, smem, O, rb * ROWS, b, kvh,
                                     gqa, nq, o_sb, o_sh, o_sq);
}

// The pieces' states of one row merged by log-sum-exp: a block per (sequence x K/V head x row block, row
// of the group, COMBINE_CHANNELS channels) of COMBINE_WARPS warps, a lane a channel. Warp w folds in
// pieces w COMBINE_PIECES .. + COMBINE_PIECES - 1 of each round of COMBINE_WARPS x COMBINE_PIECES,
// each lane loading its pieces' maxima, sums and O at once (every load of a round independent of the
// others; the maxima and sums are one address for the warp's lanes: one transaction), the running sums
// rescaled to each round's new maximum; the warps' states then meet once in shared memory. So a merge
// of up to 64 pieces is one trip to memory and one barrier. (The merge of 512 threads a row, whose
// phases met at block barriers, took 7.3 us of a 29.6 us int4 call at 32k keys, batch 1, under Nsight
// Compute; one warp of 32 pieces a round, 5.8 of 28.3 us.)
constexpr int COMBINE_CHANNELS = 32;
constexpr int COMBINE_PIECES = 32;
constexpr int COMBINE_WARPS = 2;

template <int D, bool BF16>
__global__ void __launch_bounds__(COMBINE_CHANNELS * COMBINE_WARPS)
bitdecode_combine(const float* __restrict__ part_o, const float* __restrict__ part_m,
                  const float* __restrict__ part_l, unsigned short* __restrict__ O,
                  int hkv, int gqa, int nq, int splits, int row_blocks, int block_rows,
                  long long o_sb, long long o_sh, long long o_sq) {
    static_assert(D % COMBINE_CHANNELS == 0, "whole warps of channels");
    __shared__ float warp_m[COMBINE_WARPS], warp_l[COMBINE_WARPS], warp_o[COMBINE_WARPS][COMBINE_CHANNELS];
    const int bh = blockIdx.x / row_blocks, rb = blockIdx.x % row_blocks;
    const int r = blockIdx.y;
    const int row = rb * block_rows + r;  // block_rows: the partial kernel's rows a block (16, or 8 keys as rows)
    if (row >= gqa * nq) return;  // the whole block: rows past the group hold nothing
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int c = blockIdx.z * COMBINE_CHANNELS + lane;
    const long long first = static_cast<long long>(blockIdx.x) * splits;  // (bh x row_blocks + rb) x splits

    float mx = neg_inf(), l = 0.f, acc = 0.f;
    for (int s0 = warp * COMBINE_PIECES; s0 < splits; s0 += COMBINE_WARPS * COMBINE_PIECES) {
        float m[COMBINE_PIECES], sum[COMBINE_PIECES], o[COMBINE_PIECES];
#pragma unroll
        for (int i = 0; i < COMBINE_PIECES; ++i) {
            const bool inside = s0 + i < splits;
            const long long at = (first + (inside ? s0 + i : s0)) * 16 + r;  // past the last: a piece that is
            m[i] = inside ? part_m[at] : neg_inf();                         // there, weighted 0
            sum[i] = part_l[at];
            o[i] = part_o[at * D + c];
        }
        float round_max = mx;
#pragma unroll
        for (int i = 0; i < COMBINE_PIECES; ++i) round_max = fmaxf(round_max, m[i]);
        const float shift = (round_max == neg_inf()) ? 0.f : round_max;  // nothing visible to the row so far
        const float alpha = fast_exp2(mx - shift);
        l *= alpha;
        acc *= alpha;
#pragma unroll
        for (int i = 0; i < COMBINE_PIECES; ++i) {
            const float weight = fast_exp2(m[i] - shift);  // a piece with nothing visible weighs 0
            l += weight * sum[i];
            acc += weight * o[i];
        }
        mx = round_max;
    }
    if (lane == 0) warp_m[warp] = mx, warp_l[warp] = l;
    warp_o[warp][lane] = acc;
    __syncthreads();
    if (warp > 0) return;
    float merged[1];  // a warp that had no piece, or saw nothing, weighs 0
    merge_states(
        0, COMBINE_WARPS, [&](int w) { return warp_m[w]; }, [&](int w) { return warp_l[w]; },
        [&](int w, int) { return warp_o[w][lane]; }, l, merged);
    const int b = bh / hkv, kvh = bh % hkv;
    O[group_row(b, kvh, gqa, nq, row, o_sb, o_sh, o_sq) + c] = to_bits<BF16>(merged[0] / l);
}

#ifdef KBENCH_INSTANTIATE
// nvcc build check (tests/): the instances kbench launches (cupy_bitdecode.py's default_instances()).
#define KBENCH_BD_PARTIAL(BITS, BF16, D, TN, W, VSPAN, KG1, STAGES) \
    template __global__ void bitdecode_partial<BITS, BF16, D, TN, W, VSPAN, KG1, STAGES>(BITDECODE_PARTIAL_PARAMS);
#define KBENCH_BD_KEYS(BITS, BF16, D, TN, W, VSPAN, KG1, VFOLD, KFOLD, VRAW, DENSE, PIPE) \
    template __global__ void bitdecode_partial_keys<BITS, BF16, D, TN, W, VSPAN, KG1, VFOLD, KFOLD, VRAW, DENSE, PIPE>(BITDECODE_PARTIAL_PARAMS);
#define KBENCH_BD_COMBINE(D, BF16)                                                                             \
    template __global__ void bitdecode_combine<D, BF16>(const float*, const float*, const float*,    \
                                                                   unsigned short*, int, int, int, int, int, int, \
                                                                   long long, long long, long long);
KBENCH_BD_PARTIAL(4, false, 64, 32, 4, 1, true, 0)
KBENCH_BD_PARTIAL(4, false, 64, 32, 4, 1, false, 0)
KBENCH_BD_PARTIAL(4, false, 64, 32, 4, 2, false, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, false, false, false, true, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, false, false, false, false, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, false, false, false, false, true, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, false, false, false, false, false, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 2, false, false, false, false, true, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 2, false, false, false, false, false, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, true, false, false, true, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, true, false, false, false, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, false, true, false, false, true, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, false, true, false, false, false, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, false, false, false, true, 1)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, false, false, false, false, true, 1)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 2, false, false, false, false, true, 1)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, true, false, false, true, 1)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, false, true, false, false, true, 1)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, false, false, false, true, 2)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, false, false, false, false, true, 2)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 2, false, false, false, false, true, 2)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, true, false, false, true, 2)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, false, true, false, false, true, 2)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, false, true, false, true, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, false, true, false, false, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, true, true, false, true, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, true, true, false, false, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, true, false, true, true, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, true, true, true, true, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, false, true, false, true, true, 0)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, false, false, false, true, 0)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, false, false, false, false, 0)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, false, false, false, false, true, 0)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, false, false, false, false, false, 0)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 2, false, false, false, false, true, 0)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 2, false, false, false, false, false, 0)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, true, false, false, true, 0)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, true, false, false, false, 0)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, false, true, false, false, true, 0)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, false, true, false, false, false, 0)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, false, false, false, true, 1)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, false, false, false, false, true, 1)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 2, false, false, false, false, true, 1)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, true, false, false, true, 1)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, false, true, false, false, true, 1)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, false, false, false, true, 2)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, false, false, false, false, true, 2)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 2, false, false, false, false, true, 2)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, true, false, false, true, 2)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, false, true, false, false, true, 2)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, false, true, false, true, 0)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, false, true, false, false, 0)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, true, true, false, true, 0)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, true, true, false, false, 0)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, true, false, true, true, 0)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, true, true, true, true, 0)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, false, true, false, true, true, 0)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, false, false, false, true, 0)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, false, false, false, false, 0)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, false, false, false, false, true, 0)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, false, false, false, false, false, 0)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 2, false, false, false, false, true, 0)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 2, false, false, false, false, false, 0)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, true, false, false, true, 0)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, true, false, false, false, 0)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, false, true, false, false, true, 0)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, false, true, false, false, false, 0)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, false, false, false, true, 1)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, false, false, false, false, true, 1)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 2, false, false, false, false, true, 1)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, true, false, false, true, 1)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, false, true, false, false, true, 1)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, false, false, false, true, 2)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, false, false, false, false, true, 2)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 2, false, false, false, false, true, 2)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, true, false, false, true, 2)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, false, true, false, false, true, 2)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, false, true, false, true, 0)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, false, true, false, false, 0)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, true, true, false, true, 0)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, true, true, false, false, 0)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, true, false, true, true, 0)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, true, true, true, true, 0)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, false, true, false, true, true, 0)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, false, false, false, true, 0)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, false, false, false, false, 0)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, false, false, false, false, true, 0)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, false, false, false, false, false, 0)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 2, false, false, false, false, true, 0)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 2, false, false, false, false, false, 0)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, true, false, false, true, 0)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, true, false, false, false, 0)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, false, true, false, false, true, 0)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, false, true, false, false, false, 0)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, false, false, false, true, 1)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, false, false, false, false, true, 1)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 2, false, false, false, false, true, 1)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, true, false, false, true, 1)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, false, true, false, false, true, 1)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, false, false, false, true, 2)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, false, false, false, false, true, 2)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 2, false, false, false, false, true, 2)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, true, false, false, true, 2)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, false, true, false, false, true, 2)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, false, true, false, true, 0)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, false, true, false, false, 0)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, true, true, false, true, 0)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, true, true, false, false, 0)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, true, false, true, true, 0)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, true, true, true, true, 0)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, false, true, false, true, true, 0)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, false, false, false, true, 3)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, false, false, false, false, true, 3)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 2, false, false, false, false, true, 3)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, true, false, false, true, 3)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, false, true, false, false, true, 3)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, false, false, false, true, 3)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, false, false, false, false, true, 3)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 2, false, false, false, false, true, 3)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, true, false, false, true, 3)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, false, true, false, false, true, 3)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, false, false, false, true, 3)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, false, false, false, false, true, 3)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 2, false, false, false, false, true, 3)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, true, false, false, true, 3)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, false, true, false, false, true, 3)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, false, false, false, true, 3)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, false, false, false, false, true, 3)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 2, false, false, false, false, true, 3)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, true, false, false, true, 3)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, false, true, false, false, true, 3)
KBENCH_BD_KEYS(16, false, 64, 32, 4, 1, false, false, false, false, true, 3)
KBENCH_BD_KEYS(16, false, 128, 32, 8, 1, false, false, false, false, true, 3)
KBENCH_BD_KEYS(16, true, 64, 32, 4, 1, false, false, false, false, true, 3)
KBENCH_BD_KEYS(16, true, 128, 32, 8, 1, false, false, false, false, true, 3)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, false, false, false, true, 4)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, false, false, false, false, true, 4)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 2, false, false, false, false, true, 4)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, true, true, false, false, true, 4)
KBENCH_BD_KEYS(4, false, 64, 32, 4, 1, false, true, false, false, true, 4)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, false, false, false, true, 4)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, false, false, false, false, true, 4)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 2, false, false, false, false, true, 4)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, true, true, false, false, true, 4)
KBENCH_BD_KEYS(4, false, 128, 32, 8, 1, false, true, false, false, true, 4)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, false, false, false, true, 4)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, false, false, false, false, true, 4)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 2, false, false, false, false, true, 4)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, true, true, false, false, true, 4)
KBENCH_BD_KEYS(8, false, 64, 32, 4, 1, false, true, false, false, true, 4)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, false, false, false, true, 4)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, false, false, false, false, true, 4)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 2, false, false, false, false, true, 4)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, true, true, false, false, true, 4)
KBENCH_BD_KEYS(8, false, 128, 32, 8, 1, false, true, false, false, true, 4)
KBENCH_BD_KEYS(16, false, 64, 32, 4, 1, false, false, false, false, true, 4)
KBENCH_BD_KEYS(16, false, 128, 32, 8, 1, false, false, false, false, true, 4)
KBENCH_BD_KEYS(16, true, 64, 32, 4, 1, false, false, false, false, true, 4)
KBENCH_BD_KEYS(16, true, 128, 32, 8, 1, false, false, false, false, true, 4)
KBENCH_BD_KEYS(16, false, 64, 32, 4, 1, false, false, false, false, true, 0)
KBENCH_BD_KEYS(16, false, 64, 32, 4, 1, false, false, false, false, false, 0)
KBENCH_BD_KEYS(16, false, 128, 32, 8, 1, false, false, false, false, true, 0)
KBENCH_BD_KEYS(16, false, 128, 32, 8, 1, false, false, false, false, false, 0)
KBENCH_BD_KEYS(16, true, 64, 32, 4, 1, false, false, false, false, true, 0)
KBENCH_BD_KEYS(16, true, 64, 32, 4, 1, false, false, false, false, false, 0)
KBENCH_BD_KEYS(16, true, 128, 32, 8, 1, false, false, false, false, true, 0)
KBENCH_BD_KEYS(16, true, 128, 32, 8, 1, false, false, false, false, false, 0)
KBENCH_BD_PARTIAL(4, false, 128, 32, 4, 1, true, 0)
KBENCH_BD_PARTIAL(4, false, 128, 32, 4, 1, false, 0)
KBENCH_BD_PARTIAL(4, false, 128, 32, 4, 2, false, 0)
KBENCH_BD_PARTIAL(8, false, 64, 32, 4, 1, true, 0)
KBENCH_BD_PARTIAL(8, false, 64, 32, 4, 1, false, 0)
KBENCH_BD_PARTIAL(8, false, 64, 32, 4, 2, false, 0)
KBENCH_BD_PARTIAL(8, false, 128, 32, 4, 1, true, 0)
KBENCH_BD_PARTIAL(8, false, 128, 32, 4, 1, false, 0)
KBENCH_BD_PARTIAL(8, false, 128, 32, 4, 2, false, 0)
KBENCH_BD_PARTIAL(16, false, 64, 32, 4, 1, false, 0)
KBENCH_BD_PARTIAL(16, false, 128, 32, 4, 1, false, 0)
KBENCH_BD_PARTIAL(16, true, 64, 32, 4, 1, false, 0)
KBENCH_BD_PARTIAL(16, true, 128, 32, 4, 1, false, 0)
KBENCH_BD_COMBINE(64, false)
KBENCH_BD_COMBINE(64, true)
KBENCH_BD_COMBINE(128, false)
KBENCH_BD_COMBINE(128, true)
#endif
