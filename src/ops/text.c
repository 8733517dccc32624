/* text.c — op family "text" (rows of the op table): TfIdfVectorizer.
 *
 * TfIdfVectorizer (opset 9): X int32/int64 [C] or [N,C] → Y float32 [K] or [N,K] with
 * K = max(ngram_indexes) + 1. The pool (pool_int64s) holds the n-grams of each length back to
 * back: ngram_counts[i] is where the (i+1)-grams start. N-gram number k (in pool order) counts
 * into output column ngram_indexes[k]. For each row, every n-gram of length in
 * [min_gram_length, max_gram_length] is gathered at each start position with each skip
 * 0..max_skip_count (items (skip+1) apart); unigrams are gathered once (skip 0 only). Mode TF
 * outputs the counts, IDF outputs weight (or 1) where the count is non-zero, TFIDF count * weight;
 * weights are indexed by output column, as onnxruntime and the ONNX reference do.
 * String inputs (pool_strings) are not supported by dlcc. */
#include "op-impl.h"

#include <math.h>

typedef enum tfidf_mode { TF_TF, TF_IDF, TF_TFIDF } tfidf_mode;

/* The validated attributes. Pool n-gram k has length len[k] and starts at pool[start[k]]. */
typedef struct tfidf {
    tfidf_mode mode;
    int64_t min_n, max_n, max_skip;
    const int64_t *pool, *indexes;
    int n_pool, n_ngrams;
    const float *weights;
    int n_weights;
    int64_t n_cols;
} tfidf;

/* Validates the attributes; on failure returns a status and a message in msg. */
static dl_status tfidf_read(const dl_node *n, tfidf *t, char *msg, size_t msg_len) {
    memset(t, 0, sizeof *t);
    const char *mode = dl_attr_str(n, "mode", NULL);
    if (!mode) return snprintf(msg, msg_len, "required attribute mode is missing"), DL_ERR_INVALID;
    if (strcmp(mode, "TF") == 0)
        t->mode = TF_TF;
    else if (strcmp(mode, "IDF") == 0)
        t->mode = TF_IDF;
    else if (strcmp(mode, "TFIDF") == 0)
        t->mode = TF_TFIDF;
    else
        return snprintf(msg, msg_len, "mode must be TF, IDF or TFIDF, got \"%s\"", mode),
               DL_ERR_INVALID;
    static const char *req[] = {"min_gram_length", "max_gram_length", "max_skip_count",
                                "ngram_counts", "ngram_indexes"};
    for (size_t i = 0; i < DL_ARRAY_LEN(req); i++)
        if (!dl_node_attr(n, req[i]))
            return snprintf(msg, msg_len, "required attribute %s is missing", req[i]),
                   DL_ERR_INVALID;
    if (dl_node_attr(n, "pool_strings"))
        return snprintf(msg, msg_len, "string pools (pool_strings) are not supported"),
               DL_ERR_UNSUPPORTED;
    t->min_n = dl_attr_int(n, "min_gram_length", 0);
    t->max_n = dl_attr_int(n, "max_gram_length", 0);
    t->max_skip = dl_attr_int(n, "max_skip_count", 0);
    if (t->min_n < 1 || t->max_n < t->min_n)
        return snprintf(msg, msg_len,
                        "need 1 <= min_gram_length <= max_gram_length, got %lld and %lld",
                        (long long)t->min_n, (long long)t->max_n),
               DL_ERR_INVALID;
    if (t->max_skip < 0)
        return snprintf(msg, msg_len, "max_skip_count must be >= 0"), DL_ERR_INVALID;
    const int64_t *counts;
    int n_counts = dl_attr_ints(n, "ngram_counts", &counts);
    int n_pool = dl_attr_ints(n, "pool_int64s", &t->pool);
    if (n_pool < 0) n_pool = 0;
    t->n_pool = n_pool;
    t->n_ngrams = dl_attr_ints(n, "ngram_indexes", &t->indexes);
    if (n_counts < 0) n_counts = 0;
    if (t->n_ngrams < 0) t->n_ngrams = 0;
    /* The levels must tile the pool: level i (n-grams of length i+1) spans
     * [counts[i], counts[i+1]) and its size is a multiple of i+1. */
    int64_t total = 0;
    for (int i = 0; i < n_counts; i++) {
        int64_t lo = counts[i], hi = i + 1 < n_counts ? counts[i + 1] : n_pool;
        if (lo < 0 || hi < lo || hi > n_pool)
            return snprintf(msg, msg_len,
                            "ngram_counts must be non-decreasing offsets into the pool of %d",
                            n_pool),
                   DL_ERR_INVALID;
        if (i == 0 && lo != 0)
            return snprintf(msg, msg_len, "ngram_counts must start at 0"), DL_ERR_INVALID;
        if ((hi - lo) % (i + 1) != 0)
            return snprintf(msg, msg_len, "pool level %d has %lld items, not a multiple of %d",
                            i + 1, (long long)(hi - lo), i + 1),
                   DL_ERR_INVALID;
        total += (hi - lo) / (i + 1);
    }
    if (n_counts == 0 && n_pool != 0)
        return snprintf(msg, msg_len, "ngram_counts is empty but the pool is not"), DL_ERR_INVALID;
    if (total != t->n_ngrams)
        return snprintf(msg, msg_len,
                        "ngram_indexes has %d entries but the pool holds %lld n-grams", t->n_ngrams,
                        (long long)total),
               DL_ERR_INVALID;
    int64_t max_col = -1;
    for (int k = 0; k < t->n_ngrams; k++) {
        if (t->indexes[k] < 0 || t->indexes[k] >= INT32_MAX)
            return snprintf(msg, msg_len, "ngram_indexes[%d] = %lld is out of range", k,
                            (long long)t->indexes[k]),
                   DL_ERR_INVALID;
        if (t->indexes[k] > max_col) max_col = t->indexes[k];
    }
    t->n_cols = max_col + 1;
    int n_w = dl_attr_floats(n, "weights", &t->weights);
    if (n_w < 0) {
        t->weights = NULL;
        n_w = 0;
    }
    t->n_weights = n_w;
    if (n_w > 0 && n_w < t->n_cols)
        return snprintf(msg, msg_len, "weights has %d entries but the output has %lld columns", n_w,
                        (long long)t->n_cols),
               DL_ERR_INVALID;
    return DL_OK;
}

/* The pool span [lo, hi) of each level (level i holds the (i+1)-grams), at most max_levels. */
static void tfidf_levels(const dl_node *n, int64_t *level_lo, int64_t *level_hi, int max_levels,
                         int *n_levels, int n_pool) {
    const int64_t *counts;
    int nc = dl_attr_ints(n, "ngram_counts", &counts);
    if (nc < 0) nc = 0;
    if (nc > max_levels) nc = max_levels;
    for (int i = 0; i < nc; i++) {
        level_lo[i] = counts[i];
        level_hi[i] = i + 1 < nc ? counts[i + 1] : n_pool;
    }
    *n_levels = nc;
}

static const dl_dtype k_tfidf_in[] = {DL_I32, DL_I64, DL_DTYPE_UNDEFINED};

static dl_status infer_tfidf(dl_infer *ic) {
    tfidf t;
    char msg[256];
    dl_status s = tfidf_read(ic->node, &t, msg, sizeof msg);
    if (s != DL_OK) return dl_infer_fail(ic, s, "%s", msg);
    DL_TRY(dl_infer_require_dtype(ic, 0, k_tfidf_in));
    const dl_type *x = ic->in[0];
    if (x->rank < 0) return dl_infer_set(ic, 0, DL_F32, DL_RANK_UNKNOWN, NULL);
    if (x->rank == 1) return dl_infer_set(ic, 0, DL_F32, 1, &t.n_cols);
    if (x->rank == 2) {
        int64_t dims[2] = {x->dims[0], t.n_cols};
        return dl_infer_set(ic, 0, DL_F32, 2, dims);
    }
    return dl_infer_fail(ic, DL_ERR_SHAPE, "X must be 1-D [C] or 2-D [N,C], got rank %d", x->rank);
}

static dl_status ref_tfidf(dl_kernel *kc) {
    tfidf t;
    char msg[256];
    dl_status s = tfidf_read(kc->node, &t, msg, sizeof msg);
    if (s != DL_OK) return dl_kernel_fail(kc, s, "%s", msg);
    const dl_tensor *x = kc->in[0];
    if (x->rank != 1 && x->rank != 2)
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "X must be 1-D or 2-D");
    int64_t rows = x->rank == 2 ? x->dims[0] : 1, len = x->dims[x->rank - 1];
    dl_tensor *y = kc->out[0];
    if (!y->data) {
        int64_t dims[2] = {rows, t.n_cols};
        if (x->rank == 1)
            DL_TRY(dl_kernel_alloc_out(kc, 0, DL_F32, 1, &t.n_cols));
        else
            DL_TRY(dl_kernel_alloc_out(kc, 0, DL_F32, 2, dims));
        y = kc->out[0];
    }
    if (y->dtype != DL_F32 || y->numel != rows * t.n_cols)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output shape does not match");
    if (y->numel == 0) return DL_OK;

    int64_t lo[64], hi[64];
    int n_levels;
    tfidf_levels(kc->node, lo, hi, (int)DL_ARRAY_LEN(lo), &n_levels, t.n_pool);
    int64_t max_n = t.max_n < n_levels ? t.max_n : n_levels;
    float *out = (float *)y->data;
    for (int64_t row = 0; row < rows; row++) {
        float *cnt = out + row * t.n_cols;
        int64_t base = row * len;
        /* n-gram number of the first n-gram of each level, in pool order */
        int64_t first = 0;
        for (int64_t lv = 0; lv < max_n; lv++) {
            int64_t n = lv + 1, n_at = (hi[lv] - lo[lv]) / n, level_first = first;
            first += n_at;
            if (n < t.min_n || n_at == 0) continue;
            int64_t max_skip = n == 1 ? 0 : t.max_skip;
            for (int64_t skip = 0; skip <= max_skip; skip++) {
                int64_t step = skip + 1;
                if ((n - 1) > (len - 1) / step) break; /* does not fit anywhere */
                for (int64_t st = 0; st + (n - 1) * step < len; st++) {
                    for (int64_t k = 0; k < n_at; k++) {
                        const int64_t *g = t.pool + lo[lv] + k * n;
                        int64_t m = 0;
                        while (m < n && dl_get_i64(x, base + st + m * step) == g[m]) m++;
                        if (m == n) {
                            cnt[t.indexes[level_first + k]] += 1.0f;
                            break; /* one column per n-gram (first pool match) */
                        }
                    }
                }
            }
        }
        for (int64_t j = 0; j < t.n_cols; j++) {
            float w = t.n_weights > 0 ? t.weights[j] : 1.0f;
            if (t.mode == TF_IDF)
                cnt[j] = cnt[j] > 0 ? w : 0.0f;
            else if (t.mode == TF_TFIDF)
                cnt[j] = cnt[j] * w;
        }
    }
    return DL_OK;
}

static const dl_attr_spec tfidf_attrs[] = {
    {"max_gram_length", DL_ATTR_INT}, {"max_skip_count", DL_ATTR_INT},
    {"min_gram_length", DL_ATTR_INT}, {"mode", DL_ATTR_STRING},
    {"ngram_counts", DL_ATTR_INTS},   {"ngram_indexes", DL_ATTR_INTS},
    {"pool_int64s", DL_ATTR_INTS},    {"pool_strings", DL_ATTR_STRINGS},
    {"weights", DL_ATTR_FLOATS},      {NULL, 0}};

const dl_op_def dl_ops_text[] = {
    {.name = "TfIdfVectorizer",
     .min_in = 1,
     .max_in = 1,
     .min_out = 1,
     .max_out = 1,
     .attrs = tfidf_attrs,
     .infer = infer_tfidf,
     .ref = ref_tfidf},
    {.name = NULL},
};
