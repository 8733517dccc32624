/* ref-gemm.h — typed reference GEMM shared by the op families (conv.c, matmul.c):
 *   c[M, N] += a[M, K] * b[K, N]
 * with row-major leading dims lda, ldb, ldc (in elements). Private to src/ops. */
#ifndef DL_REF_GEMM_H
#define DL_REF_GEMM_H

#include <stdint.h>

/* float32 with float accumulation and float64 with double accumulation: blocked over output
 * columns so the inner loop runs contiguously over a row of b and of c. */
void dl_ref_gemm_f32(int64_t M, int64_t N, int64_t K, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float *c, int64_t ldc);
void dl_ref_gemm_f64(int64_t M, int64_t N, int64_t K, const double *a, int64_t lda, const double *b,
                     int64_t ldb, double *c, int64_t ldc);
/* int64 with wrapping (two's complement) arithmetic. */
void dl_ref_gemm_i64(int64_t M, int64_t N, int64_t K, const int64_t *a, int64_t lda,
                     const int64_t *b, int64_t ldb, int64_t *c, int64_t ldc);

#endif
