/* gemm-micro.h — the SGEMM register-tile microkernels, one per instruction set, and the block
 * sizes that suit each. The one compiled in is chosen by the flags the kernels are built with:
 * the JIT picks them at run time from the CPU's features (or DLCC_ISA forces a path), so an
 * AVX-512 machine runs the AVX-512 kernel and tests can force the AVX2 and generic ones.
 *
 * Contract (all three): acc[MR x NR] (row-major, NR floats per row) = sum over p < kc of the
 * outer product of a[p*astep .. p*astep+MR) and b[p*bstep .. p*bstep+NR) (astep MR and bstep NR
 * in packed panels; the vector kernels also read full panels in place, with the operand's
 * stride); when `add` is set the sums are added to what acc holds (the partial sums of the
 * previous K blocks), else acc is overwritten. The depths are indexed, not stepped to: a pointer
 * stepped past the last depth of an operand read in place would point outside it.
 *
 * Block sizes (MC multiple of MR, NC multiple of NR) were measured on a Zen 5 (AVX-512, 48 KiB
 * L1D, 1 MiB L2) with bench/gemm.sh: 6x64 tiles with NC 256 reach ~200 GFLOP/s on one thread
 * where 6x32 / NC 128 reached ~165; 12x32 and 14x32 were no better than 6x64. MC 132 (rather
 * than 96) keeps BERT's M = 128 in one row of tiles, so B is packed once: 172 vs 159 GFLOP/s
 * averaged over BERT, GPT-2 and ResNet-50 shapes. MC 144 rather than 132 is a multiple of MT
 * too, so that a transposed product's tiles hold whole 16-row blocks (dlrt_gemm_run). On
 * AVX-512, MC 192 and KC 128 since (figures at their definitions), and prepacked weights go in
 * K blocks of KC_STREAM. */
#ifndef DLRT_GEMM_MICRO_H
#define DLRT_GEMM_MICRO_H

#include "dlrt-impl.h"

/* Register tiles (MR rows x NR columns, VW floats per vector, 0: scalar) of each build, named
 * once here: the build's own kernel uses its row, and a host built for another instruction set
 * plans with the row of the target it generates code for (dlrt_gemm_tiles_for). */
#define DLRT_TILE_AVX512_MR  6
#define DLRT_TILE_AVX512_NR  64
#define DLRT_TILE_AVX512_VW  16
#define DLRT_TILE_AVX2_MR    6
#define DLRT_TILE_AVX2_NR    16
#define DLRT_TILE_AVX2_VW    8
#define DLRT_TILE_GENERIC_MR 4
#define DLRT_TILE_GENERIC_NR 16

#if defined(__AVX512F__) && !defined(DLRT_GEMM_GENERIC)
#include <immintrin.h>
#define DLRT_GEMM_ISA    "avx512"
#define DLRT_GEMM_VBYTES 64
#define DLRT_GEMM_MR     DLRT_TILE_AVX512_MR
#define DLRT_GEMM_NR     DLRT_TILE_AVX512_NR
#define DLRT_GEMM_VW     DLRT_TILE_AVX512_VW
#ifndef DLRT_GEMM_MC /* overridable for tuning */
/* 192 rows (a 96 KB A block at KC 128) against 144: SGEMM 2048 one thread 230 -> 235
 * GFLOP/s, two 452-463 -> 468-471; convolutions within 1% */
#define DLRT_GEMM_MC 192
#define DLRT_GEMM_NC 256
/* a B micro-panel of 128 depths is 32 KB, which leaves L1 room for the A panel and the partial
 * sums; 192 (48 KB, all of L1) was as fast on convolutions but not on products packed per call:
 * one thread, medians, SGEMM 512 237 -> 242 GFLOP/s, 2048 219-225 -> 230-232, 1024 on 2
 * threads 440-448 -> 455-462; ResNet-50's 256 -> 64 on 56x56 0.40 -> 0.387 ms */
#define DLRT_GEMM_KC 128
#endif
#define DLRT_GEMM_MT 48 /* lcm(MR, VW): a transposed product's row unit (dlrt_gemm_run) */
/* K block for prepacked B (dlrt_gemm_run), which streams from memory: the next block is
 * prefetched while one is read, and two 16 KB micro-panels fit in L1 beside the rest */
#define DLRT_GEMM_KC_STREAM 64
typedef __m512 dlrt_vf;
#define DLRT_VZERO()       _mm512_setzero_ps()
#define DLRT_VLOAD(p)      _mm512_loadu_ps(p)
#define DLRT_VSTORE(p, v)  _mm512_storeu_ps(p, v)
#define DLRT_VBCAST(x)     _mm512_set1_ps(x)
#define DLRT_VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define DLRT_VADD(a, b)    _mm512_add_ps(a, b)
#define DLRT_VMUL(a, b)    _mm512_mul_ps(a, b)
#define DLRT_VMAX(a, b)    _mm512_max_ps(a, b)
#define DLRT_VMIN(a, b)    _mm512_min_ps(a, b)
#elif defined(__AVX2__) && defined(__FMA__) && !defined(DLRT_GEMM_GENERIC)
#include <immintrin.h>
#define DLRT_GEMM_ISA       "avx2"
#define DLRT_GEMM_VBYTES    32
/* 12 ymm accumulators + 2 for B + 1 broadcast: 15 of the 16 registers */
#define DLRT_GEMM_MR        DLRT_TILE_AVX2_MR
#define DLRT_GEMM_NR        DLRT_TILE_AVX2_NR
#define DLRT_GEMM_VW        DLRT_TILE_AVX2_VW
#define DLRT_GEMM_MC        96
#define DLRT_GEMM_NC        256
#define DLRT_GEMM_KC        256
#define DLRT_GEMM_KC_STREAM DLRT_GEMM_KC
#define DLRT_GEMM_MT        24 /* lcm(MR, VW): a transposed product's row unit */
typedef __m256 dlrt_vf;
#define DLRT_VZERO()        _mm256_setzero_ps()
#define DLRT_VLOAD(p)       _mm256_loadu_ps(p)
#define DLRT_VSTORE(p, v)   _mm256_storeu_ps(p, v)
#define DLRT_VBCAST(x)      _mm256_set1_ps(x)
#define DLRT_VFMA(a, b, c)  _mm256_fmadd_ps(a, b, c)
#define DLRT_VADD(a, b)     _mm256_add_ps(a, b)
#define DLRT_VMUL(a, b)     _mm256_mul_ps(a, b)
#define DLRT_VMAX(a, b)     _mm256_max_ps(a, b)
#define DLRT_VMIN(a, b)     _mm256_min_ps(a, b)
#else
#define DLRT_GEMM_ISA       "generic"
#define DLRT_GEMM_VBYTES    16
#define DLRT_GEMM_MR        DLRT_TILE_GENERIC_MR
#define DLRT_GEMM_NR        DLRT_TILE_GENERIC_NR
#define DLRT_GEMM_MC        96
#define DLRT_GEMM_NC        128
#define DLRT_GEMM_KC        192
#define DLRT_GEMM_KC_STREAM DLRT_GEMM_KC
#define DLRT_GEMM_MT        DLRT_GEMM_MR /* no vector store: a transposed product's row unit */
#endif

/* GNU vectors of this build's width, and their lanes as integers (masks), for kernels written
 * with vector extensions (the direct weight gradient; the direct convolution on the generic
 * build); dlrt_gv_load reads one from any alignment. */
typedef float dlrt_gv __attribute__((vector_size(DLRT_GEMM_VBYTES)));
typedef int32_t dlrt_gvi __attribute__((vector_size(DLRT_GEMM_VBYTES)));
static inline dlrt_gv dlrt_gv_load(const float *p) {
    dlrt_gv v;
    memcpy(&v, p, sizeof v);
    return v;
}

#if defined(__AVX__) && defined(DLRT_GEMM_VW)
/* r[j][i] <- r[i][j] for an 8x8 block: rows interleaved in pairs, then pairs of pairs, then the
 * 128-bit halves exchanged. */
static DLRT_INLINE void dlrt_gemm_tr8x8(__m256 r[8]) {
    __m256 t[8], s[8];
    for (int l = 0; l < 8; l += 2) {
        t[l] = _mm256_unpacklo_ps(r[l], r[l + 1]);     /* columns 0 1 4 5 of rows l, l+1 */
        t[l + 1] = _mm256_unpackhi_ps(r[l], r[l + 1]); /* columns 2 3 6 7 */
    }
    for (int h = 0; h < 8; h += 4) { /* rows h..h+3 at columns (0 4), (1 5), (2 6), (3 7) */
        s[h] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(1, 0, 1, 0));
        s[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(3, 2, 3, 2));
        s[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(1, 0, 1, 0));
        s[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int p = 0; p < 4; p++) {
        r[p] = _mm256_permute2f128_ps(s[p], s[p + 4], 0x20);     /* column p */
        r[p + 4] = _mm256_permute2f128_ps(s[p], s[p + 4], 0x31); /* column p + 4 */
    }
}
#endif

#if defined(__AVX512F__) && !defined(DLRT_GEMM_GENERIC)
/* r[j][i] <- r[i][j] for a 16x16 block of floats held as 16 vectors: pairs of rows are
 * interleaved, then pairs of pairs (64-bit), then 128-bit lanes in two steps. */
static DLRT_INLINE void dlrt_gemm_vtranspose(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4q + c], lane L: column 4L + c of rows 4q .. 4q + 3 */
    for (int q = 0; q < 4; q++) {
        u[4 * q + 0] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], 0x44);
        u[4 * q + 1] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], 0xEE);
        u[4 * q + 2] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
        u[4 * q + 3] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
    }
    for (int c = 0; c < 4; c++) {
        const __m512 w0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
        const __m512 w1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
        const __m512 x0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
        const __m512 x1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
        r[c] = _mm512_shuffle_f32x4(w0, x0, 0x88);
        r[4 + c] = _mm512_shuffle_f32x4(w0, x0, 0xDD);
        r[8 + c] = _mm512_shuffle_f32x4(w1, x1, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(w1, x1, 0xDD);
    }
}
#elif defined(__AVX2__) && defined(__FMA__) && !defined(DLRT_GEMM_GENERIC)
#define dlrt_gemm_vtranspose dlrt_gemm_tr8x8
#endif

#ifdef DLRT_GEMM_VW
/* Intrinsics: MR x (NR / VW) vector accumulators indexed by constants, fully unrolled at -O2
 * and above, so they stay in registers. */
#define DLRT_GEMM_NV (DLRT_GEMM_NR / DLRT_GEMM_VW)
/* Keeps the nv vectors v[] in registers: with fewer rows than MR, gcc folded each B load into
 * every FMA that uses it (a load per FMA instead of one per vector), and the last row tile of a
 * product whose M is not a multiple of MR ran at half speed: one thread, layer alone,
 * MobileNetV2's 32 -> 16 on 112x112 (rows 12-15 in that tile) 0.085 -> 0.067 ms, ResNet-50's
 * 256 -> 64 on 56x56 0.440 -> 0.408. */
#define DLRT_GEMM_IN_REGS(v, nv)                                                                   \
    do {                                                                                           \
        for (int q_ = 0; q_ < (nv); q_++) __asm__("" : "+v"(v[q_]));                               \
    } while (0)

/* c[rows][nv] = the sum over p < kc of the outer products of the first rows of a's panel and
 * the first nv vectors of b's (a's depths are astep floats apart: MR in a packed panel, lda
 * where a full row panel is read in place; b's bstep: NR in a packed panel, ldb where a full
 * panel is read in place). A macro, not a
 * function taking c, so that with constant rows and nv the accumulators certainly stay in
 * registers. */
#define DLRT_GEMM_MAC(kc, a, astep, b, bstep, c, rows, nv)                                         \
    do {                                                                                           \
        for (int i_ = 0; i_ < (rows); i_++)                                                        \
            for (int j_ = 0; j_ < (nv); j_++) c[i_][j_] = DLRT_VZERO();                            \
        for (int64_t p_ = 0; p_ < (kc); p_++) {                                                    \
            const float *ap_ = (a) + p_ * (astep), *bp_ = (b) + p_ * (bstep);                      \
            dlrt_vf bv_[nv];                                                                       \
            for (int j_ = 0; j_ < (nv); j_++) bv_[j_] = DLRT_VLOAD(bp_ + j_ * DLRT_GEMM_VW);       \
            DLRT_GEMM_IN_REGS(bv_, nv);                                                            \
            for (int i_ = 0; i_ < (rows); i_++) {                                                  \
                const dlrt_vf av_ = DLRT_VBCAST(ap_[i_]);                                          \
                for (int j_ = 0; j_ < (nv); j_++) c[i_][j_] = DLRT_VFMA(av_, bv_[j_], c[i_][j_]);  \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* acc[rows][nv vectors] (rows NR floats apart) = c, or += c when add. */
#define DLRT_GEMM_ACC_STORE(acc, c, rows, nv, add)                                                 \
    do {                                                                                           \
        for (int i_ = 0; i_ < (rows); i_++)                                                        \
            for (int j_ = 0; j_ < (nv); j_++) {                                                    \
                float *dst_ = (acc) + i_ * DLRT_GEMM_NR + j_ * DLRT_GEMM_VW;                       \
                DLRT_VSTORE(dst_, (add) ? DLRT_VADD(DLRT_VLOAD(dst_), c[i_][j_]) : c[i_][j_]);     \
            }                                                                                      \
    } while (0)

/* A microkernel on the first rows of each panel's MR and its first nv vectors (constants):
 * acc[rows x nv vectors] (rows NR floats apart; later rows untouched) = or += the block. Each
 * element sums in the same order whatever rows and nv: the same bits as the full kernel. */
#define DLRT_GEMM_MICRO_PART(name, rows, nv)                                                       \
    static inline void name(int kc, const float *restrict a, int64_t astep,                        \
                            const float *restrict b, int64_t bstep, float *restrict acc,           \
                            int add) {                                                             \
        dlrt_vf c[rows][nv];                                                                       \
        DLRT_GEMM_MAC(kc, a, astep, b, bstep, c, rows, nv);                                        \
        DLRT_GEMM_ACC_STORE(acc, c, rows, nv, add);                                                \
    }

/* The first nv vectors of each row only: for the last panel of a product whose N is not a
 * multiple of NR (a 14x14 plane: 196 = 3 x 64 + 4), which a full-width kernel would pad to NR
 * columns. */
DLRT_GEMM_MICRO_PART(dlrt_gemm_micro_n1, DLRT_GEMM_MR, 1)
DLRT_GEMM_MICRO_PART(dlrt_gemm_micro_n2, DLRT_GEMM_MR, 2)
DLRT_GEMM_MICRO_PART(dlrt_gemm_micro_n3, DLRT_GEMM_MR, 3)
#define DLRT_GEMM_NARROW 1

/* The first `rows` < MR rows of a full-width panel: the last row tile of a product whose M is
 * not a multiple of MR, which the full kernel would pad to MR rows (a 7x7 plane run transposed
 * has 49 = 8 x 6 + 1 rows: a ninth of its arithmetic was padding). */
DLRT_GEMM_MICRO_PART(dlrt_gemm_micro_m1, 1, DLRT_GEMM_NV)
DLRT_GEMM_MICRO_PART(dlrt_gemm_micro_m2, 2, DLRT_GEMM_NV)
DLRT_GEMM_MICRO_PART(dlrt_gemm_micro_m3, 3, DLRT_GEMM_NV)
DLRT_GEMM_MICRO_PART(dlrt_gemm_micro_m4, 4, DLRT_GEMM_NV)
DLRT_GEMM_MICRO_PART(dlrt_gemm_micro_m5, 5, DLRT_GEMM_NV)
#if DLRT_GEMM_MR != 6
#error "dlrt_gemm_micro_short covers the short tiles of a 6-row kernel"
#endif
/* CALL(n) for n = rows, a tile's valid row count 1 .. MR - 1 (5 past 4: MR is 6), so that each
 * call has a constant row count (its accumulators stay in registers). */
#define DLRT_GEMM_SHORT_ROWS(rows, CALL)                                                           \
    do {                                                                                           \
        switch (rows) {                                                                            \
        case 1:                                                                                    \
            CALL(1);                                                                               \
            break;                                                                                 \
        case 2:                                                                                    \
            CALL(2);                                                                               \
            break;                                                                                 \
        case 3:                                                                                    \
            CALL(3);                                                                               \
            break;                                                                                 \
        case 4:                                                                                    \
            CALL(4);                                                                               \
            break;                                                                                 \
        default:                                                                                   \
            CALL(5);                                                                               \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

/* Rows 1 .. MR - 1 of a full-width panel (rows is the tile's valid row count). */
static inline void dlrt_gemm_micro_short(int rows, int kc, const float *restrict a, int64_t astep,
                                         const float *restrict b, int64_t bstep,
                                         float *restrict acc, int add) {
#define DLRT_GEMM_MICRO_M(n) dlrt_gemm_micro_m##n(kc, a, astep, b, bstep, acc, add)
    DLRT_GEMM_SHORT_ROWS(rows, DLRT_GEMM_MICRO_M);
#undef DLRT_GEMM_MICRO_M
}

/* Two row panels at once (a0, a1: MR rows each; acc1 follows acc0 in the partial-sum buffer) on
 * the first nv <= 2 vectors: one vector of B and six accumulators leave the FMA units waiting on
 * their own latency and the loads (a Winograd GEMM on a 14x14 plane has N = 16), twelve do not.
 * Each accumulator sums in the same order as in dlrt_gemm_micro_n##nv: the same bits. */
#define DLRT_GEMM_MICRO_TALL(nv)                                                                   \
    static inline void dlrt_gemm_micro_tall_n##nv(                                                 \
        int kc, const float *restrict a0, const float *restrict a1, int64_t astep,                 \
        const float *restrict b, float *restrict acc, int add) {                                   \
        dlrt_vf c[2 * DLRT_GEMM_MR][nv];                                                           \
        for (int i = 0; i < 2 * DLRT_GEMM_MR; i++)                                                 \
            for (int j = 0; j < (nv); j++) c[i][j] = DLRT_VZERO();                                 \
        for (int64_t p = 0; p < kc; p++) {                                                         \
            const float *ap0 = a0 + p * astep, *ap1 = a1 + p * astep, *bp = b + p * DLRT_GEMM_NR;  \
            dlrt_vf bv[nv];                                                                        \
            for (int j = 0; j < (nv); j++) bv[j] = DLRT_VLOAD(bp + j * DLRT_GEMM_VW);              \
            for (int i = 0; i < DLRT_GEMM_MR; i++) {                                               \
                const dlrt_vf av = DLRT_VBCAST(ap0[i]);                                            \
                for (int j = 0; j < (nv); j++) c[i][j] = DLRT_VFMA(av, bv[j], c[i][j]);            \
            }                                                                                      \
            for (int i = 0; i < DLRT_GEMM_MR; i++) {                                               \
                const dlrt_vf av = DLRT_VBCAST(ap1[i]);                                            \
                for (int j = 0; j < (nv); j++)                                                     \
                    c[DLRT_GEMM_MR + i][j] = DLRT_VFMA(av, bv[j], c[DLRT_GEMM_MR + i][j]);         \
            }                                                                                      \
        }                                                                                          \
        DLRT_GEMM_ACC_STORE(acc, c, 2 * DLRT_GEMM_MR, nv, add);                                    \
    }
DLRT_GEMM_MICRO_TALL(1)
DLRT_GEMM_MICRO_TALL(2)
/* Vectors of a panel that hold its first nr columns. */
static inline int dlrt_gemm_vectors(int nr) {
    return (nr + DLRT_GEMM_VW - 1) / DLRT_GEMM_VW;
}

DLRT_GEMM_MICRO_PART(dlrt_gemm_micro, DLRT_GEMM_MR, DLRT_GEMM_NV)

/* The microkernels of a product whose left operand is read where it lies, never packed
 * (dlrt_gemm_index: a convolution's windows in its padded input): row i of the tile at depth p
 * is ab[i][off[p]], b a packed panel (NR floats per depth). acc[rows x nv vectors] = or += the
 * block (later rows untouched), each element summed over p in order, as the packed kernels sum
 * it: the same bits whatever rows and nv. */
#define DLRT_GEMM_MICRO_IDX(name, rows, nv)                                                        \
    static inline void name(int kc, const float *const *ab, const int32_t *restrict off,           \
                            const float *restrict b, float *restrict acc, int add) {               \
        dlrt_vf c[rows][nv];                                                                       \
        const float *ar[rows];                                                                     \
        for (int i = 0; i < (rows); i++) ar[i] = ab[i];                                            \
        for (int i = 0; i < (rows); i++)                                                           \
            for (int j = 0; j < (nv); j++) c[i][j] = DLRT_VZERO();                                 \
        for (int p = 0; p < kc; p++, b += DLRT_GEMM_NR) {                                          \
            const int32_t o = off[p];                                                              \
            dlrt_vf bv[nv];                                                                        \
            for (int j = 0; j < (nv); j++) bv[j] = DLRT_VLOAD(b + j * DLRT_GEMM_VW);               \
            if ((rows) < DLRT_GEMM_MR) /* B pinned in short tiles, as DLRT_GEMM_MAC pins it */     \
                DLRT_GEMM_IN_REGS(bv, nv);                                                         \
            for (int i = 0; i < (rows); i++) {                                                     \
                const dlrt_vf av = DLRT_VBCAST(ar[i][o]);                                          \
                for (int j = 0; j < (nv); j++) c[i][j] = DLRT_VFMA(av, bv[j], c[i][j]);            \
            }                                                                                      \
        }                                                                                          \
        DLRT_GEMM_ACC_STORE(acc, c, rows, nv, add);                                                \
    }
DLRT_GEMM_MICRO_IDX(dlrt_gemm_micro_idx_n1, DLRT_GEMM_MR, 1)
DLRT_GEMM_MICRO_IDX(dlrt_gemm_micro_idx_n2, DLRT_GEMM_MR, 2)
DLRT_GEMM_MICRO_IDX(dlrt_gemm_micro_idx_n3, DLRT_GEMM_MR, 3)
DLRT_GEMM_MICRO_IDX(dlrt_gemm_micro_idx_full, DLRT_GEMM_MR, DLRT_GEMM_NV)
/* The first 1 .. MR - 1 rows of a full-width panel: the last row tile of a convolution whose
 * output positions are not a multiple of MR, which the full kernel pads to MR rows (a 7x7 plane
 * has 49 = 8 x 6 + 1: a ninth of ResNet-50's 512-channel 3x3 layers was padding). */
DLRT_GEMM_MICRO_IDX(dlrt_gemm_micro_idx_m1, 1, DLRT_GEMM_NV)
DLRT_GEMM_MICRO_IDX(dlrt_gemm_micro_idx_m2, 2, DLRT_GEMM_NV)
DLRT_GEMM_MICRO_IDX(dlrt_gemm_micro_idx_m3, 3, DLRT_GEMM_NV)
DLRT_GEMM_MICRO_IDX(dlrt_gemm_micro_idx_m4, 4, DLRT_GEMM_NV)
DLRT_GEMM_MICRO_IDX(dlrt_gemm_micro_idx_m5, 5, DLRT_GEMM_NV)
/* Out of line: one call per column panel of a product, against five more inlined kernels. */
static void __attribute__((noinline))
dlrt_gemm_micro_idx_short(int rows, int kc, const float *const *ab, const int32_t *restrict off,
                          const float *restrict b, float *restrict acc, int add) {
#define DLRT_GEMM_MICRO_IDX_M(n) dlrt_gemm_micro_idx_m##n(kc, ab, off, b, acc, add)
    DLRT_GEMM_SHORT_ROWS(rows, DLRT_GEMM_MICRO_IDX_M);
#undef DLRT_GEMM_MICRO_IDX_M
}
/* The one for the first `rows` (1 .. MR) rows of a panel of nv vectors (1 .. NV); a narrow
 * panel's short tile (rare: both of a product's edges) is computed at MR rows, its rows past
 * `rows` repeating ab[0]. */
static inline void dlrt_gemm_micro_idx(int rows, int nv, int kc, const float *const *ab,
                                       const int32_t *restrict off, const float *restrict b,
                                       float *restrict acc, int add) {
    if (nv == 1)
        dlrt_gemm_micro_idx_n1(kc, ab, off, b, acc, add);
    else if (nv == 2 && DLRT_GEMM_NV > 2)
        dlrt_gemm_micro_idx_n2(kc, ab, off, b, acc, add);
    else if (nv == 3 && DLRT_GEMM_NV > 3)
        dlrt_gemm_micro_idx_n3(kc, ab, off, b, acc, add);
    else if (rows < DLRT_GEMM_MR)
        dlrt_gemm_micro_idx_short(rows, kc, ab, off, b, acc, add);
    else
        dlrt_gemm_micro_idx_full(kc, ab, off, b, acc, add);
}

/* Whether dlrt_gemm_micro_store_rows can apply ep in registers: a bias per row or per column and a
 * contiguous residual (the convolution and dense-layer cases); other strides take the row path. */
#define DLRT_GEMM_DIRECT_STORE 1
static inline int dlrt_gemm_epi_direct(const dlrt_epilogue *ep) {
    return !ep || ((!ep->bias || ep->bias_cs == 0 || ep->bias_cs == 1) &&
                   (!ep->residual || ep->res_cs == 1));
}

/* The epilogue on one vector v of a row of C, as dlrt_epi_apply orders it: bp is where the row's
 * bias starts for this vector (NULL: none; one value when bias_cs is 0), rp its residual's (NULL:
 * none). The bias goes as a product then a sum, dlrt_epi_apply's (the direct store of
 * DLRT_EPI_BLOCK fuses it into one multiply-add). ReLU and Clip are applied here (max(p, q)
 * is p > q ? p : q and min(p, q) is p < q ? p : q: dlrt_act_apply's comparisons, NaNs and signed
 * zeros included); the other activations run after the store (dlrt_gemm_act_after). The row
 * depthwise kernel takes the same steps from an epilogue resolved per plane (depthwise-row.c's
 * dlrt_dwr_store): keep the two in step, since the plane kernel's bits are promised for both. */
static DLRT_INLINE dlrt_vf dlrt_gemm_epi_vec(const dlrt_epilogue *ep, dlrt_vf v, const float *bp,
                                             const float *rp) {
    if (ep->alpha != 1.0f) v = DLRT_VMUL(v, DLRT_VBCAST(ep->alpha));
    if (bp) {
        if (ep->bias_cs == 0)
            v = DLRT_VADD(v, DLRT_VBCAST(ep->beta * bp[0]));
        else
            v = DLRT_VADD(v, DLRT_VMUL(DLRT_VBCAST(ep->beta), DLRT_VLOAD(bp)));
    }
    if (rp) v = DLRT_VADD(v, DLRT_VLOAD(rp));
    if (ep->act == DLRT_ACT_RELU) v = DLRT_VMAX(v, DLRT_VZERO());
    if (ep->act == DLRT_ACT_CLIP)
        v = DLRT_VMIN(DLRT_VBCAST(ep->act_b), DLRT_VMAX(DLRT_VBCAST(ep->act_a), v));
    return v;
}

/* dlrt_gemm_epi_vec's steps (alpha, beta * bias, residual, ReLU / Clip) on a block of register
 * vectors acc[i_][j_] (rows x cols, constants) finishing rows of C, ep not NULL: each step one
 * test, then a pass over the whole block. With the tests per vector (inside the row loop) the
 * compiler kept that loop rolled and the block on the stack: 1x1 convolutions with K = 64 spent
 * ~20% of their time storing, MobileNetV2's first (direct) layer a tenth. Expressions of i_ and
 * j_: brow, the epilogue row of block row i_ (a bias per row, bias_cs 0); bcol, where vector
 * (i_, j_)'s bias starts (bias_cs 1); res, where its residual starts. Other activations are the
 * caller's, after its stores (dlrt_gemm_act_after): a call with the block live spills it too. */
#define DLRT_EPI_BLOCK(ep, acc, rows, cols, brow, bcol, res)                                       \
    do {                                                                                           \
        if ((ep)->alpha != 1.0f) {                                                                 \
            const dlrt_vf al_ = DLRT_VBCAST((ep)->alpha);                                          \
            for (int i_ = 0; i_ < (rows); i_++)                                                    \
                for (int j_ = 0; j_ < (cols); j_++) acc[i_][j_] = DLRT_VMUL(acc[i_][j_], al_);     \
        }                                                                                          \
        if ((ep)->bias && (ep)->bias_cs == 0) {                                                    \
            for (int i_ = 0; i_ < (rows); i_++) {                                                  \
                const dlrt_vf b_ = DLRT_VBCAST((ep)->beta * (ep)->bias[(brow) * (ep)->bias_rs]);   \
                for (int j_ = 0; j_ < (cols); j_++) acc[i_][j_] = DLRT_VADD(acc[i_][j_], b_);      \
            }                                                                                      \
        } else if ((ep)->bias) { /* bias_cs 1 (dlrt_gemm_epi_direct) */                            \
            const dlrt_vf be_ = DLRT_VBCAST((ep)->beta);                                           \
            for (int i_ = 0; i_ < (rows); i_++)                                                    \
                for (int j_ = 0; j_ < (cols); j_++)                                                \
                    acc[i_][j_] = DLRT_VFMA(be_, DLRT_VLOAD(bcol), acc[i_][j_]);                   \
        }                                                                                          \
        if ((ep)->residual)                                                                        \
            for (int i_ = 0; i_ < (rows); i_++)                                                    \
                for (int j_ = 0; j_ < (cols); j_++)                                                \
                    acc[i_][j_] = DLRT_VADD(acc[i_][j_], DLRT_VLOAD(res));                         \
        if ((ep)->act == DLRT_ACT_RELU) {                                                          \
            for (int i_ = 0; i_ < (rows); i_++)                                                    \
                for (int j_ = 0; j_ < (cols); j_++)                                                \
                    acc[i_][j_] = DLRT_VMAX(acc[i_][j_], DLRT_VZERO());                            \
        } else if ((ep)->act == DLRT_ACT_CLIP) {                                                   \
            const dlrt_vf lo_ = DLRT_VBCAST((ep)->act_a), hi_ = DLRT_VBCAST((ep)->act_b);          \
            for (int i_ = 0; i_ < (rows); i_++)                                                    \
                for (int j_ = 0; j_ < (cols); j_++)                                                \
                    acc[i_][j_] = DLRT_VMIN(hi_, DLRT_VMAX(lo_, acc[i_][j_]));                     \
        }                                                                                          \
    } while (0)

/* Whether an activation is left to dlrt_act_apply on the stored values. */
static inline int dlrt_gemm_act_after(const dlrt_epilogue *ep) {
    return ep && ep->act != DLRT_ACT_NONE && ep->act != DLRT_ACT_RELU && ep->act != DLRT_ACT_CLIP;
}

/* The last K block of the first `rows` rows (a constant: MR, or fewer in a product's last row
 * tile) of a full-width tile whose top-left element is (i0, j0) of the product (always inlined:
 * called out of line, as gcc chose once dlrt_gemm_tile grew, a 1x1 convolution with K = 16 ran
 * 0.185 -> 0.26 ms):
 * acc = part (the earlier blocks' partial sums, or none) + this block, then the epilogue in the
 * order dlrt_epi_apply uses, in registers, and the rows stored straight into C (row stride ldc):
 * no round trip through a buffer. ep must pass dlrt_gemm_epi_direct. Activations other than
 * ReLU and Clip run in place on the stored row, as dlrt_epi_apply would run them on its copy. */
static DLRT_INLINE void dlrt_gemm_micro_store_rows(int kc, const float *restrict a, int64_t astep,
                                                   const float *restrict b, int64_t bstep,
                                                   const float *part, float *C, int64_t ldc,
                                                   const dlrt_epilogue *ep, int64_t i0, int64_t j0,
                                                   const int rows) {
    dlrt_vf c[DLRT_GEMM_MR][DLRT_GEMM_NV];
    DLRT_GEMM_MAC(kc, a, astep, b, bstep, c, rows, DLRT_GEMM_NV);
    if (part)
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < DLRT_GEMM_NV; j++)
                c[i][j] =
                    DLRT_VADD(DLRT_VLOAD(part + i * DLRT_GEMM_NR + j * DLRT_GEMM_VW), c[i][j]);
    if (ep)
        DLRT_EPI_BLOCK(ep, c, rows, DLRT_GEMM_NV, i0 + i_,
                       ep->bias + (i0 + i_) * ep->bias_rs + j0 + j_ * DLRT_GEMM_VW,
                       ep->residual + (i0 + i_) * ep->res_rs + j0 + j_ * DLRT_GEMM_VW);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < DLRT_GEMM_NV; j++)
            DLRT_VSTORE(C + (i0 + i) * ldc + j0 + j * DLRT_GEMM_VW, c[i][j]);
    /* after every row is stored: no call while the tile is live (every vector register is
     * caller-saved) */
    if (dlrt_gemm_act_after(ep))
        for (int i = 0; i < rows; i++)
            dlrt_act_apply(ep->act, ep->act_a, ep->act_b, C + (i0 + i) * ldc + j0, DLRT_GEMM_NR);
}

#else
/* Portable C. This exact shape (a 2-D local array, the i loop outside the j loop, ap[i] read
 * inside) is the one gcc and clang at -O3 turn into register accumulators with broadcast FMAs;
 * seemingly equivalent rewrites made one or the other spill the tile every iteration (30-50x
 * slower). Keep it so and re-measure after any change. */
static inline void dlrt_gemm_micro(int kc, const float *restrict a, int64_t astep,
                                   const float *restrict b, int64_t bstep, float *restrict acc,
                                   int add) {
    /* always MR and NR: this build never reads an operand in place (dlrt_gemm_b_in_place), since
     * a variable stride here cost 5% */
    (void)astep, (void)bstep;
    float c[DLRT_GEMM_MR][DLRT_GEMM_NR] = {{0}};
    for (int p = 0; p < kc; p++) {
        const float *bp = b + p * DLRT_GEMM_NR;
        const float *ap = a + p * DLRT_GEMM_MR;
        for (int i = 0; i < DLRT_GEMM_MR; i++)
            for (int j = 0; j < DLRT_GEMM_NR; j++) c[i][j] += ap[i] * bp[j];
    }
    for (int i = 0; i < DLRT_GEMM_MR; i++)
        for (int j = 0; j < DLRT_GEMM_NR; j++)
            acc[i * DLRT_GEMM_NR + j] = add ? acc[i * DLRT_GEMM_NR + j] + c[i][j] : c[i][j];
}

/* The same with the left operand read where it lies (dlrt_gemm_index): row i at depth p is
 * ab[i][off[p]]; rows and nv are unused (the whole tile: rows past the product repeat ab[0],
 * the panel's padding lines are zero). */
static inline void dlrt_gemm_micro_idx(int rows, int nv, int kc, const float *const *ab,
                                       const int32_t *restrict off, const float *restrict b,
                                       float *restrict acc, int add) {
    (void)rows, (void)nv;
    float c[DLRT_GEMM_MR][DLRT_GEMM_NR] = {{0}};
    for (int p = 0; p < kc; p++) {
        const float *bp = b + p * DLRT_GEMM_NR;
        float ap[DLRT_GEMM_MR];
        for (int i = 0; i < DLRT_GEMM_MR; i++) ap[i] = ab[i][off[p]];
        for (int i = 0; i < DLRT_GEMM_MR; i++)
            for (int j = 0; j < DLRT_GEMM_NR; j++) c[i][j] += ap[i] * bp[j];
    }
    for (int i = 0; i < DLRT_GEMM_MR; i++)
        for (int j = 0; j < DLRT_GEMM_NR; j++)
            acc[i * DLRT_GEMM_NR + j] = add ? acc[i * DLRT_GEMM_NR + j] + c[i][j] : c[i][j];
}
#endif

#endif
