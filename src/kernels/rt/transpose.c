/* transpose.c — dlrt_transpose32: batches of 2-D transposes of 4-byte elements, the permutations
 * that swap two runs of dims (a matrix's rows and columns, attention's [b, t, h, d] -> [b, h, d,
 * t]). The generated loop nest moved one element at a time (about 4 cycles an element); here
 * whole vector-square blocks go through the register transposes of gemm-micro.h (16x16 on
 * AVX-512, 8x8 on AVX2), the edges element by element. Only bits move, so any 4-byte type goes
 * through float vectors unchanged, and the result does not depend on the split over threads. */
#include "gemm-micro.h"

#ifdef DLRT_GEMM_VW
/* Rows [r0, r0 + VW) and columns [c0, c0 + VW) of one matrix (in: rows x cols) into out (cols
 * x rows). */
static DLRT_INLINE void dlrt_tr_block(const float *in, int64_t cols, float *out, int64_t rows,
                                      int64_t r0, int64_t c0) {
    dlrt_vf v[DLRT_GEMM_VW];
    for (int i = 0; i < DLRT_GEMM_VW; i++) v[i] = DLRT_VLOAD(in + (r0 + i) * cols + c0);
    dlrt_gemm_vtranspose(v);
    for (int j = 0; j < DLRT_GEMM_VW; j++) DLRT_VSTORE(out + (c0 + j) * rows + r0, v[j]);
}
#define DLRT_TR_VW DLRT_GEMM_VW
#else
#define DLRT_TR_VW 16
#endif

/* Output rows [c0, c1) (input columns) of one matrix. */
static void dlrt_tr_band(const float *in, int64_t rows, int64_t cols, float *out, int64_t c0,
                         int64_t c1) {
    int64_t c = c0;
#ifdef DLRT_GEMM_VW
    const int64_t vr = rows / DLRT_TR_VW * DLRT_TR_VW;
    for (; c + DLRT_TR_VW <= c1; c += DLRT_TR_VW)
        for (int64_t r = 0; r < vr; r += DLRT_TR_VW) dlrt_tr_block(in, cols, out, rows, r, c);
    /* the rows past the whole blocks, for the columns done by blocks */
    for (int64_t j = c0; j < c; j++)
        for (int64_t r = vr; r < rows; r++) out[j * rows + r] = in[r * cols + j];
#endif
    /* the columns past the whole blocks (all of them on the generic build), in tiles */
    for (int64_t r0 = 0; r0 < rows; r0 += DLRT_TR_VW) {
        const int64_t r1 = DLRT_MIN(r0 + DLRT_TR_VW, rows);
        for (int64_t j = c; j < c1; j++)
            for (int64_t r = r0; r < r1; r++) out[j * rows + r] = in[r * cols + j];
    }
}

typedef struct dlrt_tr_job {
    const float *x;
    float *y;
    int64_t rows, cols, bands;
} dlrt_tr_job;

/* Units [lo, hi): a band of VW output rows of one matrix each. */
static void dlrt_tr_units(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_tr_job *j = ctx;
    const int64_t rows = j->rows, cols = j->cols;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t b = u / j->bands, c0 = u % j->bands * DLRT_TR_VW;
        dlrt_tr_band(j->x + b * rows * cols, rows, cols, j->y + b * rows * cols, c0,
                     DLRT_MIN(c0 + DLRT_TR_VW, cols));
    }
}

void dlrt_transpose32(int64_t batch, int64_t rows, int64_t cols, const void *in, void *out) {
    if (batch <= 0 || rows <= 0 || cols <= 0) return;
    const int64_t bands = (cols + DLRT_TR_VW - 1) / DLRT_TR_VW, units = batch * bands;
    dlrt_tr_job job = {in, out, rows, cols, bands};
    dlrt_parallel_for(units,
                      units > 1 && (double)batch * (double)rows * (double)cols >= DLRT_PAR_MIN / 4,
                      dlrt_tr_units, &job);
}
