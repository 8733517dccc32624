/* matmul.c — op family "matmul": Gemm, MatMul (numpy semantics) and Einsum.
 *
 * Reference kernels: float32 uses typed float loops (float accumulation, blocked over output
 * columns so the inner loop is contiguous), float64 typed double loops; float16/bfloat16 are
 * converted to double buffers; integer dtypes use int64 loops (wrapping like the narrow type). */
#include "op-impl.h"
#include "ref-gemm.h"
#include "../train/grad.h"

#define EINSUM_LABELS (52 + DL_MAX_RANK) /* a-z, A-Z, then the ellipsis dims */

static const dl_dtype matmul_types[] = {DL_F32, DL_F64, DL_F16, DL_BF16,           DL_I32,
                                        DL_I64, DL_U32, DL_U64, DL_DTYPE_UNDEFINED};

static const dl_dtype einsum_types[] = {
    DL_F32, DL_F64, DL_F16, DL_BF16,           DL_I8, DL_U8, DL_I16, DL_U16, DL_I32,
    DL_U32, DL_I64, DL_U64, DL_DTYPE_UNDEFINED};

static const dl_attr_spec gemm_attrs[] = {
    {"alpha", DL_ATTR_FLOAT}, {"beta", DL_ATTR_FLOAT},   {"transA", DL_ATTR_INT},
    {"transB", DL_ATTR_INT},  {NULL, DL_ATTR_UNDEFINED},
};

static const dl_attr_spec einsum_attrs[] = {
    {"equation", DL_ATTR_STRING},
    {NULL, DL_ATTR_UNDEFINED},
};

/* ---- working buffers: every dtype is brought to float, double or int64 ---- */

typedef enum { W_F32, W_F64, W_I64 } work_kind;

static work_kind work_of(dl_dtype t) {
    if (t == DL_F32) return W_F32;
    if (dl_dtype_is_float(t)) return W_F64;
    return W_I64;
}

static size_t work_size(work_kind w) {
    return w == W_F32 ? sizeof(float) : 8;
}

/* A zeroed buffer of n working elements. */
static dl_status work_alloc(dl_kernel *kc, work_kind w, int64_t n, void **out) {
    size_t bytes;
    DL_TRY(dl_mul_size(kc->ctx, (size_t)(n > 0 ? n : 1), work_size(w), &bytes, "matmul buffer"));
    return dl_alloc_checked(kc->ctx, bytes, out, "matmul buffer");
}

/* A working copy of t, optionally transposed as a 2-D matrix [r, c] -> [c, r]. */
static dl_status work_copy(dl_kernel *kc, work_kind w, const dl_tensor *t, bool transpose,
                           int64_t r, int64_t c, void **out) {
    DL_TRY(work_alloc(kc, w, t->numel, out));
    for (int64_t i = 0; i < t->numel; i++) {
        int64_t src = transpose ? (i % r) * c + i / r : i;
        if (w == W_F32)
            ((float *)*out)[i] = (float)dl_get_f64(t, src);
        else if (w == W_F64)
            ((double *)*out)[i] = dl_get_f64(t, src);
        else
            ((int64_t *)*out)[i] = dl_get_i64(t, src);
    }
    return DL_OK;
}

/* c[M, N] += a[M, K] * b[K, N], all contiguous. */
static void gemm_work(work_kind w, int64_t M, int64_t N, int64_t K, const void *a, const void *b,
                      void *c) {
    if (w == W_F32)
        dl_ref_gemm_f32(M, N, K, a, K, b, N, c, N);
    else if (w == W_F64)
        dl_ref_gemm_f64(M, N, K, a, K, b, N, c, N);
    else
        dl_ref_gemm_i64(M, N, K, a, K, b, N, c, N);
}

static void store_work(work_kind w, const void *buf, dl_tensor *t) {
    if (w == W_F32 && t->dtype == DL_F32) {
        memcpy(t->data, buf, (size_t)t->numel * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < t->numel; i++) {
        if (w == W_F32)
            dl_set_f64(t, i, ((const float *)buf)[i]);
        else if (w == W_F64)
            dl_set_f64(t, i, ((const double *)buf)[i]);
        else
            dl_set_i64(t, i, ((const int64_t *)buf)[i]);
    }
}

/* ---- Gemm ---- */

static dl_status gemm_infer(dl_infer *ic) {
    DL_TRY(dl_infer_require_dtype(ic, 0, matmul_types));
    int idx[3] = {0, 1, 2};
    DL_TRY(dl_infer_same_dtype(ic, ic->n_in < 3 ? ic->n_in : 3, idx));
    const dl_type *a = ic->in[0], *b = ic->in[1];
    const dl_type *c = dl_has_in(ic, 2) ? ic->in[2] : NULL;
    if ((a->rank >= 0 && a->rank != 2) || (b->rank >= 0 && b->rank != 2))
        return dl_infer_fail(ic, DL_ERR_SHAPE, "A and B must be 2-D");
    bool ta = dl_attr_int(ic->node, "transA", 0) != 0;
    bool tb = dl_attr_int(ic->node, "transB", 0) != 0;
    int64_t M = a->rank == 2 ? a->dims[ta ? 1 : 0] : -1;
    int64_t K1 = a->rank == 2 ? a->dims[ta ? 0 : 1] : -1;
    int64_t K2 = b->rank == 2 ? b->dims[tb ? 1 : 0] : -1;
    int64_t N = b->rank == 2 ? b->dims[tb ? 0 : 1] : -1;
    if (K1 >= 0 && K2 >= 0 && K1 != K2)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "inner dims differ (%lld vs %lld)", (long long)K1,
                             (long long)K2);
    if (c && c->rank >= 0) {
        if (c->rank > 2) return dl_infer_fail(ic, DL_ERR_SHAPE, "C must have rank <= 2");
        int64_t want[2] = {M, N};
        for (int d = 0; d < c->rank; d++) {
            int64_t cd = c->dims[d], od = want[2 - c->rank + d];
            if (cd >= 0 && od >= 0 && cd != 1 && cd != od)
                return dl_infer_fail(ic, DL_ERR_SHAPE, "C does not broadcast to [%lld, %lld]",
                                     (long long)M, (long long)N);
        }
    }
    /* a symbolic M or N (negative) is kept; only an unknown rank needs a fresh symbol */
    int64_t dims[2] = {a->rank == 2 ? M : dl_infer_fresh_dim(ic),
                       b->rank == 2 ? N : dl_infer_fresh_dim(ic)};
    return dl_infer_set(ic, 0, a->dtype, 2, dims);
}

static dl_status gemm_ref(dl_kernel *kc) {
    const dl_tensor *a = kc->in[0], *b = kc->in[1];
    const dl_tensor *c = kc->n_in > 2 ? kc->in[2] : NULL;
    dl_tensor *y = kc->out[0];
    bool ta = dl_attr_int(kc->node, "transA", 0) != 0;
    bool tb = dl_attr_int(kc->node, "transB", 0) != 0;
    double alpha = dl_attr_float(kc->node, "alpha", 1.0f);
    double beta = dl_attr_float(kc->node, "beta", 1.0f);
    if (a->rank != 2 || b->rank != 2 || y->rank != 2 || !y->data)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "unexpected ranks");
    int64_t M = a->dims[ta ? 1 : 0], K = a->dims[ta ? 0 : 1], N = b->dims[tb ? 0 : 1];
    if (b->dims[tb ? 1 : 0] != K || y->dims[0] != M || y->dims[1] != N || (c && c->rank > 2))
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "shapes do not agree");
    int64_t cs[2] = {0, 0};
    if (c) {
        for (int d = 0; d < c->rank; d++) {
            int64_t cd = c->dims[d], od = y->dims[2 - c->rank + d];
            if (cd != 1 && cd != od)
                return dl_kernel_fail(kc, DL_ERR_SHAPE, "C does not broadcast to the output");
        }
        dl_broadcast_strides(c, 2, y->dims, cs);
    }
    work_kind w = work_of(a->dtype);
    void *aw = NULL, *bw = NULL, *yw = NULL;
    dl_status s = work_copy(kc, w, a, ta, a->dims[0], a->dims[1], &aw);
    if (s == DL_OK) s = work_copy(kc, w, b, tb, b->dims[0], b->dims[1], &bw);
    if (s == DL_OK) s = work_alloc(kc, w, y->numel, &yw);
    if (s == DL_OK) {
        gemm_work(w, M, N, K, aw, bw, yw);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                int64_t o = i * N + j, ci = i * cs[0] + j * cs[1];
                if (w == W_F32) {
                    float *p = (float *)yw + o;
                    *p = (float)alpha * *p;
                    if (c) *p += (float)beta * (float)dl_get_f64(c, ci);
                } else if (w == W_F64) {
                    double *p = (double *)yw + o;
                    *p = alpha * *p + (c ? beta * dl_get_f64(c, ci) : 0.0);
                } else {
                    int64_t *p = (int64_t *)yw + o;
                    if (alpha != 1.0) *p = (int64_t)(alpha * (double)*p);
                    if (c) {
                        int64_t cv = dl_get_i64(c, ci);
                        if (beta != 1.0) cv = (int64_t)(beta * (double)cv);
                        *p = (int64_t)((uint64_t)*p + (uint64_t)cv);
                    }
                }
            }
        store_work(w, yw, y);
    }
    dl_free(aw);
    dl_free(bw);
    dl_free(yw);
    return s;
}

/* ---- MatMul ---- */

static dl_status matmul_infer(dl_infer *ic) {
    DL_TRY(dl_infer_require_dtype(ic, 0, matmul_types));
    int idx[2] = {0, 1};
    DL_TRY(dl_infer_same_dtype(ic, 2, idx));
    const dl_type *a = ic->in[0], *b = ic->in[1];
    if (a->rank == 0 || b->rank == 0)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "MatMul operands must have rank >= 1");
    if (a->rank < 0 || b->rank < 0) return dl_infer_set(ic, 0, a->dtype, DL_RANK_UNKNOWN, NULL);
    int64_t K1 = a->dims[a->rank - 1], K2 = b->rank == 1 ? b->dims[0] : b->dims[b->rank - 2];
    if (K1 >= 0 && K2 >= 0 && K1 != K2)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "inner dims differ (%lld vs %lld)", (long long)K1,
                             (long long)K2);
    int ba = a->rank > 2 ? a->rank - 2 : 0, bb = b->rank > 2 ? b->rank - 2 : 0;
    int nb = ba > bb ? ba : bb;
    int rank = nb + (a->rank >= 2) + (b->rank >= 2);
    if (rank > DL_MAX_RANK) return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "rank too large");
    int64_t dims[DL_MAX_RANK];
    for (int d = 0; d < nb; d++) {
        int da = d - (nb - ba), db = d - (nb - bb);
        int64_t x = da >= 0 ? a->dims[da] : 1, z = db >= 0 ? b->dims[db] : 1;
        if (x >= 0 && z >= 0) {
            if (x != z && x != 1 && z != 1)
                return dl_infer_fail(ic, DL_ERR_SHAPE, "batch dims do not broadcast (%lld vs %lld)",
                                     (long long)x, (long long)z);
            dims[d] = x == 1 ? z : x;
        } else if (x == 1)
            dims[d] = z;
        else if (z == 1)
            dims[d] = x;
        else if (x >= 0)
            dims[d] = x; /* z symbolic: must equal x or be 1 */
        else if (z >= 0)
            dims[d] = z;
        else
            dims[d] = x == z ? x : dl_infer_fresh_dim(ic);
    }
    int r = nb;
    if (a->rank >= 2) dims[r++] = a->dims[a->rank - 2];
    if (b->rank >= 2) dims[r++] = b->dims[b->rank - 1];
    return dl_infer_set(ic, 0, a->dtype, rank, dims);
}

static dl_status matmul_ref(dl_kernel *kc) {
    const dl_tensor *a = kc->in[0], *b = kc->in[1];
    dl_tensor *y = kc->out[0];
    if (a->rank < 1 || b->rank < 1 || !y->data)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "unexpected ranks");
    /* View both operands as [batch..., M, K] and [batch..., K, N]. */
    int64_t M = a->rank >= 2 ? a->dims[a->rank - 2] : 1, K = a->dims[a->rank - 1];
    int64_t N = b->rank >= 2 ? b->dims[b->rank - 1] : 1;
    int64_t Kb = b->rank >= 2 ? b->dims[b->rank - 2] : b->dims[0];
    if (K != Kb) return dl_kernel_fail(kc, DL_ERR_SHAPE, "inner dims differ");
    if (y->numel == 0) return DL_OK; /* (also keeps the products below small) */
    int ba = a->rank > 2 ? a->rank - 2 : 0, bb = b->rank > 2 ? b->rank - 2 : 0;
    int nb = ba > bb ? ba : bb;
    int64_t bdims[DL_MAX_RANK], sa[DL_MAX_RANK], sb[DL_MAX_RANK], nbatch = 1;
    int64_t a_mat = M * K, b_mat = K * N;
    for (int d = 0; d < nb; d++) {
        int da = d - (nb - ba), db = d - (nb - bb);
        int64_t x = da >= 0 ? a->dims[da] : 1, z = db >= 0 ? b->dims[db] : 1;
        if (x != z && x != 1 && z != 1)
            return dl_kernel_fail(kc, DL_ERR_SHAPE, "batch dims do not broadcast");
        bdims[d] = x == 1 ? z : x;
        nbatch *= bdims[d];
    }
    /* batch strides in matrices, 0 where broadcast */
    {
        int64_t pa = 1, pb = 1;
        for (int d = nb - 1; d >= 0; d--) {
            int da = d - (nb - ba), db = d - (nb - bb);
            int64_t x = da >= 0 ? a->dims[da] : 1, z = db >= 0 ? b->dims[db] : 1;
            sa[d] = x == 1 ? 0 : pa;
            sb[d] = z == 1 ? 0 : pb;
            pa *= x;
            pb *= z;
        }
    }
    int64_t want;
    if (__builtin_mul_overflow(nbatch, M * N, &want) || y->numel != want)
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "output shape does not match");
    work_kind w = work_of(a->dtype);
    void *aw = NULL, *bw = NULL, *yw = NULL;
    dl_status s = work_copy(kc, w, a, false, 0, 0, &aw);
    if (s == DL_OK) s = work_copy(kc, w, b, false, 0, 0, &bw);
    if (s == DL_OK) s = work_alloc(kc, w, y->numel, &yw);
    if (s == DL_OK) {
        size_t es = work_size(w);
        int64_t bidx[DL_MAX_RANK] = {0};
        for (int64_t i = 0; i < nbatch; i++, dl_index_next(nb, bdims, bidx)) {
            int64_t oa = 0, ob = 0;
            for (int d = 0; d < nb; d++) {
                oa += bidx[d] * sa[d];
                ob += bidx[d] * sb[d];
            }
            gemm_work(w, M, N, K, (const char *)aw + (size_t)(oa * a_mat) * es,
                      (const char *)bw + (size_t)(ob * b_mat) * es,
                      (char *)yw + (size_t)(i * M * N) * es);
        }
        store_work(w, yw, y);
    }
    dl_free(aw);
    dl_free(bw);
    dl_free(yw);
    return s;
}

/* ---- Einsum ---- */

typedef struct einsum_spec {
    int n_in;
    int rank[DL_MAX_RANK * 2]; /* per input: axis count */
    int label[DL_MAX_RANK * 2][DL_MAX_RANK];
    int out_rank;
    int out_label[DL_MAX_RANK];
    int n_ell; /* broadcast (ellipsis) dims */
} einsum_spec;

#define EINSUM_MAX_IN (DL_MAX_RANK * 2)

static int letter_id(char ch) {
    if (ch >= 'a' && ch <= 'z') return ch - 'a';
    if (ch >= 'A' && ch <= 'Z') return 26 + ch - 'A';
    return -1;
}

/* Parses one term ("ab...c") into letter ids with -1 marking the ellipsis position. Returns the
 * count or -1 on error. */
static int parse_term(const char *s, size_t len, int *ids, bool *has_ell, char *err,
                      size_t errlen) {
    int n = 0;
    *has_ell = false;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (ch == ' ') continue;
        if (ch == '.') {
            if (*has_ell || i + 2 >= len + 0 || s[i + 1] != '.' || s[i + 2] != '.') {
                snprintf(err, errlen, "malformed ellipsis in equation");
                return -1;
            }
            *has_ell = true;
            i += 2;
            if (n >= DL_MAX_RANK + 1) goto too_many;
            ids[n++] = -1;
            continue;
        }
        int id = letter_id(ch);
        if (id < 0) {
            snprintf(err, errlen, "invalid character '%c' in equation", ch);
            return -1;
        }
        if (n >= DL_MAX_RANK + 1) goto too_many;
        ids[n++] = id;
    }
    return n;
too_many:
    snprintf(err, errlen, "too many subscripts in an equation term");
    return -1;
}

/* Builds the spec from the equation and the input ranks (all known). Error message or NULL. */
static const char *einsum_parse(const char *eq, int n_in, const int *ranks, einsum_spec *sp,
                                char *err, size_t errlen) {
    memset(sp, 0, sizeof *sp);
    sp->n_in = n_in;
    if (n_in > EINSUM_MAX_IN) {
        snprintf(err, errlen, "too many inputs");
        return err;
    }
    const char *arrow = strstr(eq, "->");
    size_t lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq);
    int ell_n[EINSUM_MAX_IN];
    int count[52] = {0};
    const char *p = eq;
    int t = 0;
    while (1) {
        const char *comma = memchr(p, ',', lhs_len - (size_t)(p - eq));
        size_t len = comma ? (size_t)(comma - p) : lhs_len - (size_t)(p - eq);
        if (t >= n_in) {
            snprintf(err, errlen, "equation has more terms than the %d inputs", n_in);
            return err;
        }
        int ids[DL_MAX_RANK + 1];
        bool has_ell;
        int n = parse_term(p, len, ids, &has_ell, err, errlen);
        if (n < 0) return err;
        int letters = has_ell ? n - 1 : n;
        if (letters > ranks[t] || (!has_ell && letters != ranks[t])) {
            snprintf(err, errlen, "term %d has %d subscripts for an input of rank %d", t, letters,
                     ranks[t]);
            return err;
        }
        ell_n[t] = ranks[t] - letters;
        if (ell_n[t] > sp->n_ell) sp->n_ell = ell_n[t];
        /* expand: ellipsis dims get provisional ids 52 + j (fixed up below) */
        int r = 0;
        for (int i = 0; i < n; i++) {
            if (ids[i] >= 0) {
                sp->label[t][r++] = ids[i];
                count[ids[i]]++;
            } else {
                for (int j = 0; j < ell_n[t]; j++) sp->label[t][r++] = 52 + j;
            }
        }
        sp->rank[t] = r;
        t++;
        if (!comma) break;
        p = comma + 1;
    }
    if (t != n_in) {
        snprintf(err, errlen, "equation has %d terms for %d inputs", t, n_in);
        return err;
    }
    /* right-align each input's ellipsis dims on the broadcast ellipsis */
    for (int i = 0; i < n_in; i++)
        for (int r = 0; r < sp->rank[i]; r++)
            if (sp->label[i][r] >= 52) sp->label[i][r] += sp->n_ell - ell_n[i];
    if (arrow) {
        int ids[DL_MAX_RANK + 1];
        bool has_ell;
        int n = parse_term(arrow + 2, strlen(arrow + 2), ids, &has_ell, err, errlen);
        if (n < 0) return err;
        int r = 0;
        bool seen[52] = {false};
        if (sp->n_ell > 0 && !has_ell) {
            snprintf(err, errlen, "the output must contain '...' to keep the broadcast dims");
            return err;
        }
        for (int i = 0; i < n; i++) {
            if (ids[i] < 0) {
                for (int j = 0; j < sp->n_ell; j++) {
                    if (r >= DL_MAX_RANK) goto rank_err;
                    sp->out_label[r++] = 52 + j;
                }
                continue;
            }
            if (!count[ids[i]] || seen[ids[i]]) {
                snprintf(err, errlen, "output subscript %d is repeated or not in the inputs", i);
                return err;
            }
            seen[ids[i]] = true;
            if (r >= DL_MAX_RANK) goto rank_err;
            sp->out_label[r++] = ids[i];
        }
        sp->out_rank = r;
    } else {
        int r = 0;
        for (int j = 0; j < sp->n_ell; j++) sp->out_label[r++] = 52 + j;
        /* letters used once, in alphabetical (ASCII: upper case first) order */
        for (int pass = 0; pass < 2; pass++)
            for (int l = 0; l < 26; l++) {
                int id = pass == 0 ? 26 + l : l;
                if (count[id] == 1) {
                    if (r >= DL_MAX_RANK) goto rank_err;
                    sp->out_label[r++] = id;
                }
            }
        sp->out_rank = r;
    }
    return NULL;
rank_err:
    snprintf(err, errlen, "output rank exceeds %d", DL_MAX_RANK);
    return err;
}

/* Size of every label given input dims (< 0 symbolic). Error message or NULL. */
static const char *einsum_dims(const einsum_spec *sp, const int64_t *const *dims, int64_t *ld,
                               char *err, size_t errlen) {
    for (int l = 0; l < EINSUM_LABELS; l++) ld[l] = -2; /* unused */
    for (int i = 0; i < sp->n_in; i++)
        for (int r = 0; r < sp->rank[i]; r++) {
            int l = sp->label[i][r];
            int64_t d = dims[i][r];
            if (d < 0) {
                if (ld[l] == -2) ld[l] = -1;
                continue;
            }
            if (ld[l] < 0 || ld[l] == d)
                ld[l] = d;
            else if (l >= 52 && (ld[l] == 1 || d == 1)) {
                if (ld[l] == 1) ld[l] = d;
            } else {
                snprintf(err, errlen, "subscript of input %d axis %d has size %lld, expected %lld",
                         i, r, (long long)d, (long long)ld[l]);
                return err;
            }
        }
    return NULL;
}

static dl_status einsum_infer(dl_infer *ic) {
    DL_TRY(dl_infer_require_dtype(ic, 0, einsum_types));
    int ranks[EINSUM_MAX_IN];
    const int64_t *dims[EINSUM_MAX_IN];
    if (ic->n_in > EINSUM_MAX_IN)
        return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "Einsum supports at most %d inputs",
                             EINSUM_MAX_IN);
    for (int i = 0; i < ic->n_in; i++) {
        if (!dl_has_in(ic, i)) return dl_infer_fail(ic, DL_ERR_INVALID, "input %d is missing", i);
        if (ic->in[i]->dtype != ic->in[0]->dtype)
            return dl_infer_fail(ic, DL_ERR_TYPE, "inputs must share one dtype");
        if (ic->in[i]->rank < 0)
            return dl_infer_set(ic, 0, ic->in[0]->dtype, DL_RANK_UNKNOWN, NULL);
        ranks[i] = ic->in[i]->rank;
        dims[i] = ic->in[i]->dims;
    }
    const char *eq = dl_attr_str(ic->node, "equation", NULL);
    if (!eq) return dl_infer_fail(ic, DL_ERR_INVALID, "attribute equation is required");
    einsum_spec sp;
    char err[200];
    const char *e = einsum_parse(eq, ic->n_in, ranks, &sp, err, sizeof err);
    if (!e) {
        int64_t ld[EINSUM_LABELS];
        e = einsum_dims(&sp, dims, ld, err, sizeof err);
        if (!e) {
            int64_t od[DL_MAX_RANK];
            for (int r = 0; r < sp.out_rank; r++)
                od[r] = ld[sp.out_label[r]] >= 0 ? ld[sp.out_label[r]] : dl_infer_fresh_dim(ic);
            return dl_infer_set(ic, 0, ic->in[0]->dtype, sp.out_rank, od);
        }
    }
    return dl_infer_fail(ic, DL_ERR_INVALID, "equation '%s': %s", eq, e);
}

static dl_status einsum_ref(dl_kernel *kc) {
    int n_in = kc->n_in;
    if (n_in > EINSUM_MAX_IN) return dl_kernel_fail(kc, DL_ERR_UNSUPPORTED, "too many inputs");
    int ranks[EINSUM_MAX_IN];
    const int64_t *dims[EINSUM_MAX_IN];
    for (int i = 0; i < n_in; i++) {
        ranks[i] = kc->in[i]->rank;
        dims[i] = kc->in[i]->dims;
    }
    einsum_spec sp;
    int64_t ld[EINSUM_LABELS];
    char err[200];
    const char *e =
        einsum_parse(dl_attr_str(kc->node, "equation", ""), n_in, ranks, &sp, err, sizeof err);
    if (!e) e = einsum_dims(&sp, dims, ld, err, sizeof err);
    if (e) return dl_kernel_fail(kc, DL_ERR_INVALID, "%s", e);
    dl_tensor *y = kc->out[0];
    if (!y->data || y->rank != sp.out_rank)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "unexpected output");
    /* loop labels: output labels first, then the summed ones */
    int loop[EINSUM_LABELS], n_loop = 0;
    bool is_out[EINSUM_LABELS] = {false};
    for (int r = 0; r < sp.out_rank; r++) {
        loop[n_loop++] = sp.out_label[r];
        is_out[sp.out_label[r]] = true;
        if (y->dims[r] != ld[sp.out_label[r]])
            return dl_kernel_fail(kc, DL_ERR_SHAPE, "output shape does not match");
    }
    for (int l = 0; l < EINSUM_LABELS; l++)
        if (ld[l] >= 0 && !is_out[l]) loop[n_loop++] = l;
    for (int i = 0; i < n_in; i++)
        if (kc->in[i]->numel == 0) return DL_OK; /* empty sums: the output stays zero */
    int n_sum = n_loop - sp.out_rank;
    if (n_sum > DL_MAX_RANK * 2)
        return dl_kernel_fail(kc, DL_ERR_UNSUPPORTED, "too many summed subscripts");
    int64_t sum_dims[EINSUM_LABELS], n_terms = 1;
    for (int k = 0; k < n_sum; k++) {
        sum_dims[k] = ld[loop[sp.out_rank + k]];
        if (sum_dims[k] != 0 && n_terms > ((int64_t)1 << 40) / sum_dims[k])
            return dl_kernel_fail(kc, DL_ERR_LIMIT, "summation is too large");
        n_terms *= sum_dims[k];
    }
    /* per input, the stride of every loop label (repeated labels add up: diagonals) */
    int64_t(*lstride)[EINSUM_LABELS] = dl_calloc((size_t)n_in, sizeof *lstride);
    void **buf = dl_calloc((size_t)n_in, sizeof(void *));
    work_kind w = dl_dtype_is_float(y->dtype) ? W_F64 : W_I64;
    dl_status s = lstride && buf ? DL_OK : dl_kernel_fail(kc, DL_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n_in && s == DL_OK; i++) {
        const dl_tensor *t = kc->in[i];
        int64_t st[DL_MAX_RANK];
        dl_strides(t->rank, t->dims, st);
        for (int r = 0; r < t->rank; r++) {
            int l = sp.label[i][r];
            if (t->dims[r] == 1 && ld[l] != 1) continue; /* broadcast ellipsis dim */
            lstride[i][l] += st[r];
        }
        s = work_copy(kc, w, t, false, 0, 0, &buf[i]);
    }
    if (s == DL_OK && y->numel > 0) {
        int64_t oidx[DL_MAX_RANK] = {0};
        for (int64_t o = 0; o < y->numel; o++, dl_index_next(sp.out_rank, y->dims, oidx)) {
            int64_t base[EINSUM_MAX_IN];
            for (int i = 0; i < n_in; i++) {
                base[i] = 0;
                for (int r = 0; r < sp.out_rank; r++) base[i] += oidx[r] * lstride[i][loop[r]];
            }
            int64_t sidx[EINSUM_LABELS] = {0};
            double accf = 0;
            uint64_t acci = 0;
            for (int64_t k = 0; k < n_terms; k++, dl_index_next(n_sum, sum_dims, sidx)) {
                double pf = 1;
                uint64_t pi = 1;
                for (int i = 0; i < n_in; i++) {
                    int64_t off = base[i];
                    for (int q = 0; q < n_sum; q++)
                        off += sidx[q] * lstride[i][loop[sp.out_rank + q]];
                    if (w == W_F64)
                        pf *= ((const double *)buf[i])[off];
                    else
                        pi *= (uint64_t)((const int64_t *)buf[i])[off];
                }
                accf += pf;
                acci += pi;
            }
            if (w == W_F64)
                dl_set_f64(y, o, accf);
            else
                dl_set_i64(y, o, (int64_t)acci);
        }
    }
    for (int i = 0; buf && i < n_in; i++) dl_free(buf[i]);
    dl_free(buf);
    dl_free(lstride);
    return s;
}

/* ---- gradient rules (grad.h) ---- */

static dl_value *unsqueeze(dl_grad_ctx *gc, dl_value *v, int64_t axis) {
    return dg_op2(gc, "Unsqueeze", v, dg_ints(gc, 1, &axis), NULL);
}

/* Y = A @ B with numpy matmul semantics: dA = dY @ Bᵀ, dB = Aᵀ @ dY, each summed over the batch
 * dims it was broadcast along; a 1-D operand is treated as a row (A) or column (B) vector. */
static dl_status matmul_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *a = n->in[0], *b = n->in[1], *g = dy[0];
    int ra = a->type.rank, rb = b->type.rank;
    if (ra == 1 && rb == 1) {
        if (dg_needs(gc, n, 0)) dx[0] = dg_op2(gc, "Mul", g, b, NULL);
        if (dg_needs(gc, n, 1)) dx[1] = dg_op2(gc, "Mul", g, a, NULL);
        return dg_status(gc);
    }
    if (ra >= 2 && rb == 2 && a->type.dims[ra - 1] >= 0 && b->type.dims[1] >= 0) {
        /* A shared matrix B (a dense layer): fold A's batch dims into rows, so each gradient is
         * one GEMM with the transpose in its flags — no Transpose node, and dB needs no sum
         * over the batch (that is what the GEMM's inner dim does). */
        int64_t ka[2] = {-1, a->type.dims[ra - 1]}, ny[2] = {-1, b->type.dims[1]};
        dl_value *a2 = ra == 2 ? a : dg_op2(gc, "Reshape", a, dg_ints(gc, 2, ka), NULL);
        dl_value *g2 = ra == 2 ? g : dg_op2(gc, "Reshape", g, dg_ints(gc, 2, ny), NULL);
        if (dg_needs(gc, n, 0))
            dx[0] = dg_reshape_like(gc, dg_op2(gc, "Gemm", g2, b, "transB=1"), a);
        if (dg_needs(gc, n, 1)) dx[1] = dg_op2(gc, "Gemm", a2, g2, "transA=1");
        return dg_status(gc);
    }
    dl_value *a2 = ra == 1 ? unsqueeze(gc, a, 0) : a, *b2 = rb == 1 ? unsqueeze(gc, b, 1) : b;
    if (ra == 1) g = unsqueeze(gc, g, -2);
    if (rb == 1) g = unsqueeze(gc, g, -1);
    if (dg_needs(gc, n, 0)) {
        dl_value *d = dg_op2(gc, "MatMul", g, dg_transpose_last2(gc, b2), NULL);
        dx[0] = dg_sum_to(gc, d, a);
    }
    if (dg_needs(gc, n, 1)) {
        dl_value *d = dg_op2(gc, "MatMul", dg_transpose_last2(gc, a2), g, NULL);
        if (rb == 1) {
            int64_t last = -1;
            d = dg_op2(gc, "Squeeze", d, dg_ints(gc, 1, &last), NULL);
        }
        dx[1] = dg_sum_to(gc, d, b);
    }
    return dg_status(gc);
}

/* Y = alpha·A'B' + beta·C (A' = Aᵀ when transA...): each operand's gradient is one Gemm with
 * the transposes folded into its flags. */
static dl_status gemm_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    int ta = (int)dl_attr_int(n, "transA", 0) != 0, tb = (int)dl_attr_int(n, "transB", 0) != 0;
    double alpha = dl_attr_float(n, "alpha", 1.0f), beta = dl_attr_float(n, "beta", 1.0f);
    char at[96];
    if (dg_needs(gc, n, 0)) {
        if (!ta) {
            snprintf(at, sizeof at, "alpha=%.9g;transA=0;transB=%d", alpha, !tb);
            dx[0] = dg_op2(gc, "Gemm", dy[0], n->in[1], at);
        } else {
            snprintf(at, sizeof at, "alpha=%.9g;transA=%d;transB=1", alpha, tb);
            dx[0] = dg_op2(gc, "Gemm", n->in[1], dy[0], at);
        }
    }
    if (dg_needs(gc, n, 1)) {
        if (!tb) {
            snprintf(at, sizeof at, "alpha=%.9g;transA=%d;transB=0", alpha, !ta);
            dx[1] = dg_op2(gc, "Gemm", n->in[0], dy[0], at);
        } else {
            snprintf(at, sizeof at, "alpha=%.9g;transA=1;transB=%d", alpha, ta);
            dx[1] = dg_op2(gc, "Gemm", dy[0], n->in[0], at);
        }
    }
    if (dg_needs(gc, n, 2)) {
        dl_value *g = dy[0];
        if (beta != 1.0) g = dg_op2(gc, "Mul", g, dg_scalar(gc, beta, g->type.dtype), NULL);
        dx[2] = dg_sum_to(gc, g, n->in[2]);
    }
    return dg_status(gc);
}

const dl_op_def dl_ops_matmul[] = {
    {.name = "Gemm",
     .min_in = 2,
     .max_in = 3,
     .min_out = 1,
     .max_out = 1,
     .attrs = gemm_attrs,
     .infer = gemm_infer,
     .ref = gemm_ref,
     .grad = gemm_grad},
    {.name = "MatMul",
     .min_in = 2,
     .max_in = 2,
     .min_out = 1,
     .max_out = 1,
     .infer = matmul_infer,
     .ref = matmul_ref,
     .grad = matmul_grad},
    {.name = "Einsum",
     .min_in = 1,
     .max_in = DL_VARIADIC,
     .min_out = 1,
     .max_out = 1,
     .attrs = einsum_attrs,
     .infer = einsum_infer,
     .ref = einsum_ref},
    {.name = NULL},
};
