/* ref-gemm.c — the typed reference GEMM (see ref-gemm.h). */
#include "ref-gemm.h"

#define DEFINE_REF_GEMM(T, SUF)                                                                    \
    void dl_ref_gemm_##SUF(int64_t M, int64_t N, int64_t K, const T *a, int64_t lda, const T *b,   \
                           int64_t ldb, T *c, int64_t ldc) {                                       \
        const int64_t BLK = 256;                                                                   \
        for (int64_t j0 = 0; j0 < N; j0 += BLK) {                                                  \
            int64_t jn = N - j0 < BLK ? N - j0 : BLK;                                              \
            for (int64_t i = 0; i < M; i++) {                                                      \
                T *restrict crow = c + i * ldc + j0;                                               \
                for (int64_t k = 0; k < K; k++) {                                                  \
                    T av = a[i * lda + k];                                                         \
                    const T *restrict brow = b + k * ldb + j0;                                     \
                    int64_t j = 0;                                                                 \
                    /* unrolled so that the compiler can use vector instructions (at -O2 too) */   \
                    for (; j + 8 <= jn; j += 8) {                                                  \
                        crow[j] += av * brow[j];                                                   \
                        crow[j + 1] += av * brow[j + 1];                                           \
                        crow[j + 2] += av * brow[j + 2];                                           \
                        crow[j + 3] += av * brow[j + 3];                                           \
                        crow[j + 4] += av * brow[j + 4];                                           \
                        crow[j + 5] += av * brow[j + 5];                                           \
                        crow[j + 6] += av * brow[j + 6];                                           \
                        crow[j + 7] += av * brow[j + 7];                                           \
                    }                                                                              \
                    for (; j < jn; j++) crow[j] += av * brow[j];                                   \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

DEFINE_REF_GEMM(float, f32)
DEFINE_REF_GEMM(double, f64)

void dl_ref_gemm_i64(int64_t M, int64_t N, int64_t K, const int64_t *a, int64_t lda,
                     const int64_t *b, int64_t ldb, int64_t *c, int64_t ldc) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++) {
            uint64_t av = (uint64_t)a[i * lda + k]; /* wrapping arithmetic */
            for (int64_t j = 0; j < N; j++)
                c[i * ldc + j] =
                    (int64_t)((uint64_t)c[i * ldc + j] + av * (uint64_t)b[k * ldb + j]);
        }
}
