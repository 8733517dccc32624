/* signal.c — op family "signal" (rows of the op table): DFT, STFT, MelWeightMatrix (opset 17).
 *
 * Complex tensors are real tensors with a trailing dim of 2 (real, imaginary); real inputs may
 * have a trailing dim of 1. The reference kernels use a naive O(n^2) DFT in double precision with
 * exact twiddle indices (j*k mod n). */
#include "op-impl.h"

#include <math.h>

static const double two_pi = 6.283185307179586476925286766559;

/* Reads a known scalar int input; *known false when not statically known. */
static dl_status scalar_int(dl_infer *ic, int i, const char *what, int64_t *v, bool *known) {
    static const dl_dtype it[] = {DL_I32, DL_I64, DL_DTYPE_UNDEFINED};
    *known = false;
    if (!dl_has_in(ic, i)) return DL_OK;
    DL_TRY(dl_infer_require_dtype(ic, i, it));
    const dl_type *t = ic->in[i];
    if (t->rank > 1 || (t->rank == 1 && t->dims[0] >= 0 && t->dims[0] != 1))
        return dl_infer_fail(ic, DL_ERR_SHAPE, "%s must be a scalar", what);
    int n = 0;
    int64_t vals[1];
    DL_TRY(dl_infer_const_ints(ic, i, vals, 1, &n, known));
    if (*known) {
        if (n != 1) return dl_infer_fail(ic, DL_ERR_SHAPE, "%s must be a scalar", what);
        *v = vals[0];
    }
    return DL_OK;
}

static int64_t kernel_scalar(const dl_tensor *t) {
    return t && t->numel == 1 ? dl_get_i64(t, 0) : -1;
}

/* Naive DFT of n complex points read from in (in_len valid points, zero after), written to
 * out_re/out_im for bins [0, nout). sign: -1 forward, +1 inverse (scaled by 1/n). */
static void dft_1d(const double *in_re, const double *in_im, int64_t in_len, int64_t n,
                   int64_t nout, bool inverse, double *out_re, double *out_im) {
    int64_t m = in_len < n ? in_len : n;
    double sign = inverse ? 1.0 : -1.0;
    for (int64_t k = 0; k < nout; k++) {
        double sr = 0, si = 0;
        int64_t jk = 0; /* j * k mod n, kept exact; k < n */
        for (int64_t j = 0; j < m; j++, jk = jk + k >= n ? jk + k - n : jk + k) {
            double ang = sign * two_pi * (double)jk / (double)n;
            double c = cos(ang), s = sin(ang);
            sr += in_re[j] * c - in_im[j] * s;
            si += in_re[j] * s + in_im[j] * c;
        }
        if (inverse) sr /= (double)n, si /= (double)n;
        out_re[k] = sr;
        out_im[k] = si;
    }
}

/* ---- DFT ---- */

static const dl_attr_spec dft_attrs[] = {
    {"axis", DL_ATTR_INT},
    {"inverse", DL_ATTR_INT},
    {"onesided", DL_ATTR_INT},
    {NULL, 0},
};

static dl_status dft_axis(int64_t axis, int rank, int *out) {
    if (axis < 0) axis += rank;
    if (axis < 0 || axis > rank - 2) return DL_ERR_INVALID;
    *out = (int)axis;
    return DL_OK;
}

static dl_status dft_infer(dl_infer *ic) {
    DL_TRY(dl_infer_require_float(ic, 0));
    const dl_type *x = ic->in[0];
    int64_t inv = dl_attr_int(ic->node, "inverse", 0), one = dl_attr_int(ic->node, "onesided", 0);
    if ((inv != 0 && inv != 1) || (one != 0 && one != 1))
        return dl_infer_fail(ic, DL_ERR_INVALID, "inverse and onesided must be 0 or 1");
    int64_t len = 0;
    bool known = false;
    DL_TRY(scalar_int(ic, 1, "dft_length", &len, &known));
    if (known && len < 1)
        return dl_infer_fail(ic, DL_ERR_INVALID, "dft_length must be positive, got %lld",
                             (long long)len);
    if (x->rank < 0) return dl_infer_set(ic, 0, x->dtype, DL_RANK_UNKNOWN, NULL);
    if (x->rank < 2)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "input must have rank >= 2, got %d", x->rank);
    int64_t last = x->dims[x->rank - 1];
    if (last >= 0 && last != 1 && last != 2)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "last dim must be 1 (real) or 2 (complex), got %lld",
                             (long long)last);
    int axis;
    int64_t a = dl_attr_int(ic->node, "axis", 1);
    if (dft_axis(a, x->rank, &axis) != DL_OK)
        return dl_infer_fail(ic, DL_ERR_INVALID, "axis %lld is not a signal axis of rank %d",
                             (long long)a, x->rank);
    int64_t d[DL_MAX_RANK];
    memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
    d[x->rank - 1] = 2;
    int64_t n = dl_has_in(ic, 1) ? (known ? len : -1) : x->dims[axis];
    if (dl_has_in(ic, 1) && !known)
        d[axis] = dl_infer_fresh_dim(ic);
    else if (n >= 0)
        d[axis] = one ? n / 2 + 1 : n;
    else if (one)
        d[axis] = dl_infer_fresh_dim(ic);
    return dl_infer_set(ic, 0, x->dtype, x->rank, d);
}

static dl_status dft_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    int r = x->rank, axis;
    if (r < 2 || dft_axis(dl_attr_int(kc->node, "axis", 1), r, &axis) != DL_OK)
        return dl_kernel_fail(kc, DL_ERR_INVALID, "bad axis");
    bool inverse = dl_attr_int(kc->node, "inverse", 0) != 0;
    bool onesided = dl_attr_int(kc->node, "onesided", 0) != 0;
    int64_t cplx = x->dims[r - 1];
    if (cplx != 1 && cplx != 2) return dl_kernel_fail(kc, DL_ERR_SHAPE, "bad last dim");
    int64_t in_len = x->dims[axis];
    int64_t n = in_len;
    if (kc->n_in > 1 && kc->in[1]) {
        n = kernel_scalar(kc->in[1]);
        if (n < 1) return dl_kernel_fail(kc, DL_ERR_INVALID, "dft_length must be positive");
    }
    int64_t nout = onesided ? n / 2 + 1 : n;
    /* outer = product of dims before axis, inner = product of dims between axis and the last */
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; i++) outer *= x->dims[i];
    for (int i = axis + 1; i < r - 1; i++) inner *= x->dims[i];
    if (y->rank != r || y->dims[axis] != nout || y->dims[r - 1] != 2 ||
        y->numel != outer * inner * nout * 2)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output shape mismatch");
    int64_t m = in_len < n ? in_len : n;
    size_t cnt = (size_t)(2 * m + 2 * nout), bytes;
    double *buf = NULL;
    DL_TRY(dl_mul_size(kc->ctx, cnt ? cnt : 1, sizeof(double), &bytes, "dft scratch"));
    DL_TRY(dl_alloc_checked(kc->ctx, bytes, (void **)&buf, "dft scratch"));
    double *ire = buf, *iim = ire + m, *ore = iim + m, *oim = ore + nout;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t in = 0; in < inner; in++) {
            for (int64_t j = 0; j < m; j++) {
                int64_t e = ((o * in_len + j) * inner + in) * cplx;
                ire[j] = dl_get_f64(x, e);
                iim[j] = cplx == 2 ? dl_get_f64(x, e + 1) : 0.0;
            }
            dft_1d(ire, iim, m, n, nout, inverse, ore, oim);
            for (int64_t k = 0; k < nout; k++) {
                int64_t e = ((o * nout + k) * inner + in) * 2;
                dl_set_f64(y, e, ore[k]);
                dl_set_f64(y, e + 1, oim[k]);
            }
        }
    }
    dl_free(buf);
    return DL_OK;
}

/* ---- STFT ---- */

static const dl_attr_spec stft_attrs[] = {
    {"onesided", DL_ATTR_INT},
    {NULL, 0},
};

static dl_status stft_infer(dl_infer *ic) {
    DL_TRY(dl_infer_require_float(ic, 0));
    const dl_type *x = ic->in[0];
    int64_t one = dl_attr_int(ic->node, "onesided", 1);
    if (one != 0 && one != 1) return dl_infer_fail(ic, DL_ERR_INVALID, "onesided must be 0 or 1");
    if (x->rank >= 0 && x->rank != 3)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "signal must have rank 3, got %d", x->rank);
    if (x->rank == 3 && x->dims[2] >= 0 && x->dims[2] != 1 && x->dims[2] != 2)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "signal last dim must be 1 or 2");
    if (!dl_has_in(ic, 1)) return dl_infer_fail(ic, DL_ERR_INVALID, "frame_step is required");
    int64_t step = 0, flen = -1, fl = 0;
    bool step_known, fl_known;
    DL_TRY(scalar_int(ic, 1, "frame_step", &step, &step_known));
    if (step_known && step < 1)
        return dl_infer_fail(ic, DL_ERR_INVALID, "frame_step must be positive");
    DL_TRY(scalar_int(ic, 3, "frame_length", &fl, &fl_known));
    if (fl_known) {
        if (fl < 1) return dl_infer_fail(ic, DL_ERR_INVALID, "frame_length must be positive");
        flen = fl;
    }
    if (dl_has_in(ic, 2)) {
        const dl_type *w = ic->in[2];
        if (w->dtype != x->dtype)
            return dl_infer_fail(ic, DL_ERR_TYPE, "window must have the dtype of signal");
        if (w->rank >= 0 && w->rank != 1)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "window must be 1-D");
        if (w->rank == 1 && w->dims[0] >= 0) {
            if (flen >= 0 && flen != w->dims[0])
                return dl_infer_fail(ic, DL_ERR_SHAPE, "window length %lld != frame_length %lld",
                                     (long long)w->dims[0], (long long)flen);
            if (!dl_has_in(ic, 3)) flen = w->dims[0];
            if (flen == 0) return dl_infer_fail(ic, DL_ERR_SHAPE, "window is empty");
        }
    } else if (!dl_has_in(ic, 3)) {
        return dl_infer_fail(ic, DL_ERR_INVALID, "either window or frame_length is required");
    }
    int64_t d[4];
    d[0] = x->rank == 3 ? x->dims[0] : dl_infer_fresh_dim(ic);
    int64_t L = x->rank == 3 ? x->dims[1] : -1;
    if (L >= 0 && flen >= 0 && L < flen)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "signal length %lld < frame_length %lld",
                             (long long)L, (long long)flen);
    d[1] = L >= 0 && flen >= 0 && step_known ? (L - flen) / step + 1 : dl_infer_fresh_dim(ic);
    d[2] = flen >= 0 ? (one ? flen / 2 + 1 : flen) : dl_infer_fresh_dim(ic);
    d[3] = 2;
    return dl_infer_set(ic, 0, x->dtype, 4, d);
}

static dl_status stft_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0], *win = kc->n_in > 2 ? kc->in[2] : NULL;
    dl_tensor *y = kc->out[0];
    bool onesided = dl_attr_int(kc->node, "onesided", 1) != 0;
    int64_t step = kernel_scalar(kc->in[1]);
    int64_t flen = kc->n_in > 3 && kc->in[3] ? kernel_scalar(kc->in[3]) : (win ? win->numel : -1);
    if (x->rank != 3 || step < 1 || flen < 1 || (win && win->numel != flen) || x->dims[1] < flen ||
        (x->dims[2] != 1 && x->dims[2] != 2))
        return dl_kernel_fail(kc, DL_ERR_INVALID, "bad STFT arguments");
    int64_t B = x->dims[0], L = x->dims[1], cplx = x->dims[2];
    int64_t frames = (L - flen) / step + 1, nout = onesided ? flen / 2 + 1 : flen;
    if (y->numel != B * frames * nout * 2)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output shape mismatch");
    size_t bytes;
    double *buf = NULL;
    DL_TRY(dl_mul_size(kc->ctx, (size_t)(2 * flen + 2 * nout), sizeof(double), &bytes, "stft"));
    DL_TRY(dl_alloc_checked(kc->ctx, bytes, (void **)&buf, "stft scratch"));
    double *ire = buf, *iim = ire + flen, *ore = iim + flen, *oim = ore + nout;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t f = 0; f < frames; f++) {
            for (int64_t j = 0; j < flen; j++) {
                int64_t e = (b * L + f * step + j) * cplx;
                double w = win ? dl_get_f64(win, j) : 1.0;
                ire[j] = dl_get_f64(x, e) * w;
                iim[j] = cplx == 2 ? dl_get_f64(x, e + 1) * w : 0.0;
            }
            dft_1d(ire, iim, flen, flen, nout, false, ore, oim);
            for (int64_t k = 0; k < nout; k++) {
                int64_t e = ((b * frames + f) * nout + k) * 2;
                dl_set_f64(y, e, ore[k]);
                dl_set_f64(y, e + 1, oim[k]);
            }
        }
    }
    dl_free(buf);
    return DL_OK;
}

/* ---- MelWeightMatrix ---- */

static const dl_attr_spec mel_attrs[] = {
    {"output_datatype", DL_ATTR_INT},
    {NULL, 0},
};


static dl_status mel_infer(dl_infer *ic) {
    dl_dtype dt = dl_dtype_from_onnx(dl_attr_int(ic->node, "output_datatype", 1));
    if (dt == DL_DTYPE_UNDEFINED)
        return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "unsupported output_datatype");
    for (int i = 0; i < 5; i++)
        if (!dl_has_in(ic, i)) return dl_infer_fail(ic, DL_ERR_INVALID, "all 5 inputs required");
    int64_t nmel = 0, dlen = 0, sr = 0;
    bool k1, k2, k3;
    DL_TRY(scalar_int(ic, 0, "num_mel_bins", &nmel, &k1));
    DL_TRY(scalar_int(ic, 1, "dft_length", &dlen, &k2));
    DL_TRY(scalar_int(ic, 2, "sample_rate", &sr, &k3));
    DL_TRY(dl_infer_require_float(ic, 3));
    DL_TRY(dl_infer_require_float(ic, 4));
    if ((k1 && nmel < 1) || (k2 && dlen < 1) || (k3 && sr < 1))
        return dl_infer_fail(ic, DL_ERR_INVALID,
                             "num_mel_bins, dft_length and sample_rate must be positive");
    int64_t d[2] = {k2 ? dlen / 2 + 1 : dl_infer_fresh_dim(ic), k1 ? nmel : dl_infer_fresh_dim(ic)};
    return dl_infer_set(ic, 0, dt, 2, d);
}

static dl_status mel_ref(dl_kernel *kc) {
    int64_t nmel = kernel_scalar(kc->in[0]), dlen = kernel_scalar(kc->in[1]);
    int64_t sr = kernel_scalar(kc->in[2]);
    if (nmel < 1 || dlen < 1 || sr < 1 || kc->in[3]->numel != 1 || kc->in[4]->numel != 1)
        return dl_kernel_fail(kc, DL_ERR_INVALID, "bad MelWeightMatrix arguments");
    double lo = dl_get_f64(kc->in[3], 0), hi = dl_get_f64(kc->in[4], 0);
    int64_t nspec = dlen / 2 + 1;
    dl_tensor *y = kc->out[0];
    if (y->rank != 2 || y->dims[0] != nspec || y->dims[1] != nmel)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output shape mismatch");
    size_t bytes;
    int64_t *bins = NULL;
    DL_TRY(dl_mul_size(kc->ctx, (size_t)nmel + 2, sizeof(int64_t), &bytes, "mel bins"));
    DL_TRY(dl_alloc_checked(kc->ctx, bytes, (void **)&bins, "mel bins"));
    double lo_mel = 2595.0 * log10(1.0 + lo / 700.0), hi_mel = 2595.0 * log10(1.0 + hi / 700.0);
    double step = (hi_mel - lo_mel) / (double)(nmel + 2);
    for (int64_t i = 0; i < nmel + 2; i++) {
        double f = (double)i * step + lo_mel;
        f = 700.0 * (pow(10.0, f / 2595.0) - 1.0);
        double b = floor(((double)dlen + 1.0) * f / (double)sr);
        if (!(b > -4e18 && b < 4e18)) {
            dl_free(bins);
            return dl_kernel_fail(kc, DL_ERR_INVALID, "mel frequency bins are not finite");
        }
        bins[i] = (int64_t)b;
    }
    bool is_float = dl_dtype_is_float(y->dtype);
    for (int64_t i = 0; i < nmel; i++) {
        int64_t left = bins[i], center = bins[i + 1], right = bins[i + 2];
        int64_t lc = center - left, ch = right - center;
        for (int64_t j = left; j <= center; j++) {
            if (j < 0 || j >= nspec) continue;
            double v = lc == 0 ? 1.0 : (double)(j - left) / (double)lc;
            if (is_float)
                dl_set_f64(y, j * nmel + i, v);
            else
                dl_set_i64(y, j * nmel + i, (int64_t)v);
        }
        if (ch > 0) {
            for (int64_t j = center; j < right; j++) {
                if (j < 0 || j >= nspec) continue;
                double v = (double)(right - j) / (double)ch;
                if (is_float)
                    dl_set_f64(y, j * nmel + i, v);
                else
                    dl_set_i64(y, j * nmel + i, (int64_t)v);
            }
        }
    }
    dl_free(bins);
    return DL_OK;
}

const dl_op_def dl_ops_signal[] = {
    {.name = "DFT",
     .min_in = 1,
     .max_in = 2,
     .min_out = 1,
     .max_out = 1,
     .attrs = dft_attrs,
     .infer = dft_infer,
     .ref = dft_ref},
    {.name = "STFT",
     .min_in = 2,
     .max_in = 4,
     .min_out = 1,
     .max_out = 1,
     .attrs = stft_attrs,
     .infer = stft_infer,
     .ref = stft_ref},
    {.name = "MelWeightMatrix",
     .min_in = 5,
     .max_in = 5,
     .min_out = 1,
     .max_out = 1,
     .attrs = mel_attrs,
     .infer = mel_infer,
     .ref = mel_ref},
    {.name = NULL},
};
