/* resize.c — op family "resize": Resize (opsets 10, 11, 13, 18 forms), Upsample (opsets 7, 9)
 * and GridSample (opset 16, 2-D).
 *
 * Resize is separable: for every axis and every output coordinate we precompute up to four
 * (input index, weight) taps (nearest: 1, linear: 2, cubic: 4) following the ONNX reference
 * (edge-clamped neighbours; exclude_outside renormalizes), then every output element sums the
 * product of the per-axis taps. Values go through double. */
#include "op-impl.h"

#include <math.h>

#define MAX_TAPS   4
#define SIZE_LIMIT ((int64_t)1 << 40)

static const dl_attr_spec resize_attrs[] = {
    {"antialias", DL_ATTR_INT},
    {"axes", DL_ATTR_INTS},
    {"coordinate_transformation_mode", DL_ATTR_STRING},
    {"cubic_coeff_a", DL_ATTR_FLOAT},
    {"exclude_outside", DL_ATTR_INT},
    {"extrapolation_value", DL_ATTR_FLOAT},
    {"keep_aspect_ratio_policy", DL_ATTR_STRING},
    {"mode", DL_ATTR_STRING},
    {"nearest_mode", DL_ATTR_STRING},
    {NULL, DL_ATTR_UNDEFINED},
};

static const dl_attr_spec upsample_attrs[] = {
    {"mode", DL_ATTR_STRING},
    {"scales", DL_ATTR_FLOATS},
    {NULL, DL_ATTR_UNDEFINED},
};

static const dl_attr_spec gridsample_attrs[] = {
    {"align_corners", DL_ATTR_INT},
    {"mode", DL_ATTR_STRING},
    {"padding_mode", DL_ATTR_STRING},
    {NULL, DL_ATTR_UNDEFINED},
};

static const dl_dtype data_types[] = {
    DL_F32, DL_F64, DL_F16, DL_BF16,           DL_I8, DL_U8, DL_I16, DL_U16, DL_I32,
    DL_U32, DL_I64, DL_U64, DL_DTYPE_UNDEFINED};

typedef enum { M_NEAREST, M_LINEAR, M_CUBIC } interp_mode;
typedef enum {
    C_HALF_PIXEL,
    C_HALF_PIXEL_SYM,
    C_PYTORCH_HALF_PIXEL,
    C_ALIGN_CORNERS,
    C_ASYMMETRIC,
    C_TF_HALF_PIXEL_NN,
    C_TF_CROP_AND_RESIZE
} coord_mode;
typedef enum { N_ROUND_FLOOR, N_ROUND_CEIL, N_FLOOR, N_CEIL } nearest_mode;

/* Everything a Resize/Upsample node computes, per axis. */
typedef struct resize_plan {
    int rank, opset;
    interp_mode mode;
    coord_mode coord;
    nearest_mode nearest;
    double cubic_a, extrapolation;
    bool exclude_outside;
    int64_t in[DL_MAX_RANK], out[DL_MAX_RANK]; /* out -1 when not known yet */
    double scale[DL_MAX_RANK];
    double roi_start[DL_MAX_RANK], roi_end[DL_MAX_RANK];
    bool scales_read; /* scale[] came from scales (the input's values, or Upsample-7's attribute) */
} resize_plan;

static bool is_upsample(const dl_node *n) {
    return !strcmp(n->op->name, "Upsample");
}

/* Attribute part of the plan. Error message or NULL. */
static const char *plan_attrs(const dl_node *n, int opset, resize_plan *p) {
    bool legacy = is_upsample(n) || opset < 11; /* Upsample and Resize-10 semantics */
    const char *mode = dl_attr_str(n, "mode", "nearest");
    if (!strcmp(mode, "nearest"))
        p->mode = M_NEAREST;
    else if (!strcmp(mode, "linear") || (legacy && !strcmp(mode, "bilinear")))
        p->mode = M_LINEAR;
    else if (!strcmp(mode, "cubic") && !legacy)
        p->mode = M_CUBIC;
    else
        return "unsupported mode";
    p->coord = C_ASYMMETRIC;
    p->nearest = N_FLOOR;
    p->cubic_a = -0.75;
    p->extrapolation = 0;
    p->exclude_outside = false;
    if (legacy) return NULL;
    const char *ct = dl_attr_str(n, "coordinate_transformation_mode", "half_pixel");
    static const struct {
        const char *name;
        coord_mode m;
    } cms[] = {{"half_pixel", C_HALF_PIXEL},
               {"half_pixel_symmetric", C_HALF_PIXEL_SYM},
               {"pytorch_half_pixel", C_PYTORCH_HALF_PIXEL},
               {"align_corners", C_ALIGN_CORNERS},
               {"asymmetric", C_ASYMMETRIC},
               {"tf_half_pixel_for_nn", C_TF_HALF_PIXEL_NN},
               {"tf_crop_and_resize", C_TF_CROP_AND_RESIZE}};
    bool found = false;
    for (size_t i = 0; i < DL_ARRAY_LEN(cms); i++)
        if (!strcmp(ct, cms[i].name)) {
            p->coord = cms[i].m;
            found = true;
        }
    if (!found) return "unsupported coordinate_transformation_mode";
    const char *nm = dl_attr_str(n, "nearest_mode", "round_prefer_floor");
    if (!strcmp(nm, "round_prefer_floor"))
        p->nearest = N_ROUND_FLOOR;
    else if (!strcmp(nm, "round_prefer_ceil"))
        p->nearest = N_ROUND_CEIL;
    else if (!strcmp(nm, "floor"))
        p->nearest = N_FLOOR;
    else if (!strcmp(nm, "ceil"))
        p->nearest = N_CEIL;
    else
        return "unsupported nearest_mode";
    p->cubic_a = dl_attr_float(n, "cubic_coeff_a", -0.75f);
    p->extrapolation = dl_attr_float(n, "extrapolation_value", 0.0f);
    p->exclude_outside = dl_attr_int(n, "exclude_outside", 0) != 0;
    if (dl_attr_int(n, "antialias", 0) != 0) return "antialias is not supported";
    return NULL;
}

/* Input slots of scales / sizes / roi for this node (-1: none). */
static void input_slots(const dl_node *n, int opset, int *roi, int *scales, int *sizes) {
    *roi = *scales = *sizes = -1;
    if (is_upsample(n)) {
        if (opset >= 9) *scales = 1;
    } else if (opset < 11) {
        *scales = 1;
    } else {
        *roi = 1;
        *scales = 2;
        *sizes = 3;
    }
}

/* Values of the inputs the plan needs (NULL where absent, or not known statically: known[]). */
typedef struct resize_inputs {
    const dl_tensor *roi, *scales, *sizes;
    bool roi_present, scales_present, sizes_present; /* present and non-empty (when known) */
    bool known;                                      /* all present values known */
} resize_inputs;

/* Fills the shape part of the plan from the input values. Error message or NULL. */
static const char *plan_shape(const dl_node *n, const resize_inputs *ri, resize_plan *p, char *err,
                              size_t errlen) {
    int r = p->rank;
    int axes[DL_MAX_RANK], na = r;
    for (int d = 0; d < r; d++) {
        axes[d] = d;
        p->scale[d] = 1;
        p->out[d] = p->in[d];
        p->roi_start[d] = 0;
        p->roi_end[d] = 1;
    }
    const int64_t *av;
    int nav = dl_attr_ints(n, "axes", &av);
    if (nav >= 0) {
        if (nav > r) return "too many axes";
        bool seen[DL_MAX_RANK] = {false};
        for (int i = 0; i < nav; i++) {
            int64_t a = av[i] < 0 ? av[i] + r : av[i];
            if (a < 0 || a >= r || seen[a]) return "axes value out of range or repeated";
            seen[a] = true;
            axes[i] = (int)a;
        }
        na = nav;
    }
    if (is_upsample(n) && p->opset < 9) {
        const float *fs;
        int nf = dl_attr_floats(n, "scales", &fs);
        if (nf != r) {
            snprintf(err, errlen, "scales attribute has %d values for rank %d", nf, r);
            return err;
        }
        for (int d = 0; d < r; d++) {
            if (!(fs[d] >= 1.0f) || fs[d] > 1e6f) return "Upsample scales must be >= 1";
            p->scale[d] = fs[d];
            p->out[d] = p->in[d] < 0 ? -1 : (int64_t)floor(p->in[d] * p->scale[d]);
        }
        p->scales_read = true;
        return NULL;
    }
    if (ri->roi && p->coord == C_TF_CROP_AND_RESIZE) {
        if (ri->roi->numel != 2 * na) {
            snprintf(err, errlen, "roi has %lld values, expected %d", (long long)ri->roi->numel,
                     2 * na);
            return err;
        }
        for (int i = 0; i < na; i++) {
            p->roi_start[axes[i]] = dl_get_f64(ri->roi, i);
            p->roi_end[axes[i]] = dl_get_f64(ri->roi, i + na);
        }
    }
    if (ri->sizes_present) {
        if (ri->scales_present) return "only one of scales and sizes may be given";
        if (!ri->sizes) {
            for (int i = 0; i < na; i++) p->out[axes[i]] = -1;
            return NULL;
        }
        if (ri->sizes->numel != na) {
            snprintf(err, errlen, "sizes has %lld values, expected %d", (long long)ri->sizes->numel,
                     na);
            return err;
        }
        const char *policy = dl_attr_str(n, "keep_aspect_ratio_policy", "stretch");
        int pol = !strcmp(policy, "stretch")       ? 0
                  : !strcmp(policy, "not_larger")  ? 1
                  : !strcmp(policy, "not_smaller") ? 2
                                                   : -1;
        if (pol < 0) return "unsupported keep_aspect_ratio_policy";
        double common = pol == 1 ? INFINITY : 0;
        for (int i = 0; i < na; i++) {
            int64_t s = dl_get_i64(ri->sizes, i), in = p->in[axes[i]];
            if (s < 0 || s > SIZE_LIMIT) return "sizes value out of range";
            p->out[axes[i]] = s;
            if (in > 0)
                p->scale[axes[i]] = (double)s / (double)in;
            else if (in == 0 && s != 0)
                return "cannot resize an empty axis";
            if (pol == 1 && p->scale[axes[i]] < common) common = p->scale[axes[i]];
            if (pol == 2 && p->scale[axes[i]] > common) common = p->scale[axes[i]];
            if (in < 0) p->out[axes[i]] = pol ? -1 : s;
        }
        if (pol)
            for (int i = 0; i < na; i++) {
                int d = axes[i];
                p->scale[d] = common;
                if (p->in[d] >= 0) p->out[d] = (int64_t)floor(common * (double)p->in[d] + 0.5);
            }
        return NULL;
    }
    if (!ri->scales_present) return "one of scales and sizes is required";
    if (!ri->scales) {
        for (int i = 0; i < na; i++) p->out[axes[i]] = -1;
        return NULL;
    }
    if (ri->scales->numel != na) {
        snprintf(err, errlen, "scales has %lld values, expected %d", (long long)ri->scales->numel,
                 na);
        return err;
    }
    for (int i = 0; i < na; i++) {
        double s = dl_get_f64(ri->scales, i);
        int d = axes[i];
        if (!(s > 0) || s > 1e6) return "scales must be positive";
        p->scale[d] = s;
        if (p->in[d] >= 0) {
            double o = floor(s * (double)p->in[d]);
            if (o > (double)SIZE_LIMIT) return "output size too large";
            p->out[d] = (int64_t)o;
        } else {
            p->out[d] = -1;
        }
    }
    p->scales_read = true;
    return NULL;
}

static bool input_present(const dl_type *t, const dl_tensor *v) {
    if (!t) return false;
    if (v) return v->numel > 0;
    return !(t->rank == 1 && t->dims[0] == 0);
}

static dl_status resize_infer(dl_infer *ic) {
    DL_TRY(dl_infer_require_dtype(ic, 0, data_types));
    const dl_type *x = ic->in[0];
    resize_plan p;
    memset(&p, 0, sizeof p);
    const char *e = plan_attrs(ic->node, ic->opset, &p);
    if (e) return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "%s", e);
    if (x->rank < 0) return dl_infer_set(ic, 0, x->dtype, DL_RANK_UNKNOWN, NULL);
    p.rank = x->rank;
    p.opset = ic->opset;
    for (int d = 0; d < x->rank; d++) p.in[d] = x->dims[d];
    int si[3];
    input_slots(ic->node, ic->opset, &si[0], &si[1], &si[2]);
    resize_inputs ri;
    memset(&ri, 0, sizeof ri);
    const dl_tensor **vals[3] = {&ri.roi, &ri.scales, &ri.sizes};
    bool *pres[3] = {&ri.roi_present, &ri.scales_present, &ri.sizes_present};
    for (int k = 0; k < 3; k++) {
        if (si[k] < 0 || !dl_has_in(ic, si[k])) continue;
        const dl_type *t = ic->in[si[k]];
        const dl_tensor *v = ic->value[si[k]];
        if (k == 2 && t->dtype != DL_I64)
            return dl_infer_fail(ic, DL_ERR_TYPE, "sizes must be int64");
        if (k < 2 && !dl_dtype_is_float(t->dtype))
            return dl_infer_fail(ic, DL_ERR_TYPE, "%s must be a float tensor",
                                 k ? "scales" : "roi");
        if (t->rank > 1) return dl_infer_fail(ic, DL_ERR_SHAPE, "input %d must be 1-D", si[k]);
        *pres[k] = input_present(t, v);
        *vals[k] = *pres[k] ? v : NULL;
    }
    char err[200];
    e = plan_shape(ic->node, &ri, &p, err, sizeof err);
    if (e) return dl_infer_fail(ic, DL_ERR_INVALID, "%s", e);
    int64_t dims[DL_MAX_RANK];
    /* a symbolic dim that scales (known values, not sizes) multiply by 1 keeps its symbol */
    for (int d = 0; d < x->rank; d++)
        dims[d] = p.out[d] >= 0                                          ? p.out[d]
                  : p.scales_read && p.scale[d] == 1.0 && x->dims[d] < 0 ? x->dims[d]
                                                                         : dl_infer_fresh_dim(ic);
    return dl_infer_set(ic, 0, x->dtype, x->rank, dims);
}

/* ---- taps ---- */

typedef struct axis_taps {
    int n;       /* taps per output coordinate (<= MAX_TAPS) */
    int64_t *ix; /* [out][n] input indices */
    double *w;   /* [out][n] weights */
    bool *outside;
} axis_taps;

static void cubic_coeffs(double t, double A, double *c) {
    double s = 1 - t;
    c[0] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
    c[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
    c[2] = ((A + 2) * s - (A + 3)) * s * s + 1;
    c[3] = ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A;
}

/* Fills the taps of one axis. */
static void axis_fill(const resize_plan *p, int d, axis_taps *t) {
    int64_t in = p->in[d], out = p->out[d];
    double scale = p->scale[d];
    double out_len = scale * (double)in; /* as in the ONNX reference: not rounded */
    t->n = p->mode == M_NEAREST ? 1 : p->mode == M_LINEAR ? 2 : 4;
    for (int64_t o = 0; o < out; o++) {
        double x, xr = (double)o;
        bool outside = false;
        switch (p->coord) {
        case C_HALF_PIXEL:
            x = (xr + 0.5) / scale - 0.5;
            break;
        case C_HALF_PIXEL_SYM: {
            double adj = (double)out / out_len, center = (double)in / 2;
            x = center * (1 - adj) + (xr + 0.5) / scale - 0.5;
            break;
        }
        case C_PYTORCH_HALF_PIXEL:
            x = out_len > 1 ? (xr + 0.5) / scale - 0.5 : 0;
            break;
        case C_ALIGN_CORNERS:
            x = out_len == 1 ? 0 : xr * (double)(in - 1) / (out_len - 1);
            break;
        case C_TF_HALF_PIXEL_NN:
            x = (xr + 0.5) / scale;
            break;
        case C_TF_CROP_AND_RESIZE: {
            double s0 = p->roi_start[d], s1 = p->roi_end[d];
            if (out_len == 1)
                x = (s1 - s0) * (double)(in - 1) / 2;
            else
                x = xr * (s1 - s0) * (double)(in - 1) / (out_len - 1);
            x += s0 * (double)(in - 1);
            outside = x < 0 || x > (double)(in - 1);
            break;
        }
        default:
            x = xr / scale;
            break;
        }
        int64_t *ix = t->ix + o * t->n;
        double *w = t->w + o * t->n;
        t->outside[o] = outside;
        if (!isfinite(x) || outside) x = 0;
        if (x < -4) x = -4; /* every tap is clamped to the edge (or excluded) anyway */
        if (x > (double)in + 3) x = (double)in + 3;
        double fl = floor(x), ratio = x - fl;
        int64_t x0 = (int64_t)fl;
        if (p->mode == M_NEAREST) {
            int64_t k;
            if (ratio == 0)
                k = x0;
            else if (p->nearest == N_ROUND_FLOOR)
                k = ratio <= 0.5 ? x0 : x0 + 1;
            else if (p->nearest == N_ROUND_CEIL)
                k = ratio < 0.5 ? x0 : x0 + 1;
            else if (p->nearest == N_FLOOR)
                k = x0;
            else
                k = x0 + 1;
            ix[0] = k;
            w[0] = 1;
        } else if (p->mode == M_LINEAR) {
            ix[0] = x0;
            ix[1] = x0 + 1;
            w[0] = 1 - ratio;
            w[1] = ratio;
        } else {
            cubic_coeffs(ratio, p->cubic_a, w);
            for (int k = 0; k < 4; k++) ix[k] = x0 - 1 + k;
        }
        double sum = 0;
        for (int k = 0; k < t->n; k++) {
            if (p->exclude_outside && (ix[k] < 0 || ix[k] >= in)) w[k] = 0;
            sum += w[k];
            ix[k] = ix[k] < 0 ? 0 : ix[k] >= in ? in - 1 : ix[k]; /* edge padding */
        }
        if (p->exclude_outside && sum != 0)
            for (int k = 0; k < t->n; k++) w[k] /= sum;
    }
}

static dl_status resize_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    resize_plan p;
    memset(&p, 0, sizeof p);
    const char *e = plan_attrs(kc->node, kc->opset, &p);
    if (e) return dl_kernel_fail(kc, DL_ERR_UNSUPPORTED, "%s", e);
    p.rank = x->rank;
    p.opset = kc->opset;
    for (int d = 0; d < x->rank; d++) p.in[d] = x->dims[d];
    int si[3];
    input_slots(kc->node, kc->opset, &si[0], &si[1], &si[2]);
    resize_inputs ri;
    memset(&ri, 0, sizeof ri);
    const dl_tensor **vals[3] = {&ri.roi, &ri.scales, &ri.sizes};
    bool *pres[3] = {&ri.roi_present, &ri.scales_present, &ri.sizes_present};
    for (int k = 0; k < 3; k++) {
        if (si[k] < 0 || si[k] >= kc->n_in || !kc->in[si[k]]) continue;
        *pres[k] = kc->in[si[k]]->numel > 0;
        *vals[k] = *pres[k] ? kc->in[si[k]] : NULL;
    }
    char err[200];
    e = plan_shape(kc->node, &ri, &p, err, sizeof err);
    if (e) return dl_kernel_fail(kc, DL_ERR_INVALID, "%s", e);
    if (!y->data || y->rank != x->rank)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "unexpected output");
    for (int d = 0; d < x->rank; d++)
        if (y->dims[d] != p.out[d])
            return dl_kernel_fail(kc, DL_ERR_SHAPE, "output shape does not match the resize");
    if (y->numel == 0) return DL_OK;
    if (x->numel == 0) return dl_kernel_fail(kc, DL_ERR_INVALID, "cannot resize an empty input");

    int r = x->rank;
    axis_taps taps[DL_MAX_RANK];
    memset(taps, 0, sizeof taps);
    dl_status s = DL_OK;
    for (int d = 0; d < r && s == DL_OK; d++) {
        size_t cnt = (size_t)p.out[d] * MAX_TAPS;
        taps[d].ix = dl_malloc(cnt * sizeof(int64_t) + 1);
        taps[d].w = dl_malloc(cnt * sizeof(double) + 1);
        taps[d].outside = dl_malloc((size_t)p.out[d] + 1);
        if (!taps[d].ix || !taps[d].w || !taps[d].outside)
            s = dl_kernel_fail(kc, DL_ERR_NOMEM, "out of memory");
        else
            axis_fill(&p, d, &taps[d]);
    }
    if (s == DL_OK) {
        int64_t xs[DL_MAX_RANK], oidx[DL_MAX_RANK] = {0};
        dl_strides(r, x->dims, xs);
        bool is_float = dl_dtype_is_float(y->dtype);
        for (int64_t i = 0; i < y->numel; i++, dl_index_next(r, y->dims, oidx)) {
            bool outside = false;
            for (int d = 0; d < r; d++) outside = outside || taps[d].outside[oidx[d]];
            double v = 0;
            if (outside) {
                v = p.extrapolation;
            } else {
                int k[DL_MAX_RANK] = {0};
                while (1) {
                    double wprod = 1;
                    int64_t off = 0;
                    for (int d = 0; d < r; d++) {
                        int64_t t = oidx[d] * taps[d].n + k[d];
                        wprod *= taps[d].w[t];
                        off += taps[d].ix[t] * xs[d];
                    }
                    if (wprod != 0) v += wprod * dl_get_f64(x, off);
                    int d = r - 1;
                    while (d >= 0 && ++k[d] == taps[d].n) k[d--] = 0;
                    if (d < 0) break;
                }
            }
            if (is_float)
                dl_set_f64(y, i, v);
            else
                dl_set_i64(y, i, (int64_t)nearbyint(v));
        }
    }
    for (int d = 0; d < r; d++) {
        dl_free(taps[d].ix);
        dl_free(taps[d].w);
        dl_free(taps[d].outside);
    }
    return s;
}

/* ---- for backends ---- */

const char *dl_resize_static(const dl_node *n, int rank, const int64_t *in, int64_t *out,
                             double *scale, int axis, int64_t cap, int *n_taps, int64_t *ix,
                             double *w) {
    resize_plan p;
    memset(&p, 0, sizeof p);
    const char *e = plan_attrs(n, n->opset, &p);
    if (e) return e;
    /* outside its roi a crop takes the extrapolation value: not a tap of the input */
    if (p.coord == C_TF_CROP_AND_RESIZE) return "tf_crop_and_resize";
    if (rank < 1 || rank > DL_MAX_RANK) return "rank";
    p.rank = rank;
    p.opset = n->opset;
    for (int d = 0; d < rank; d++) p.in[d] = in[d];
    int si[3];
    input_slots(n, n->opset, &si[0], &si[1], &si[2]);
    resize_inputs ri;
    memset(&ri, 0, sizeof ri);
    const dl_tensor **vals[3] = {&ri.roi, &ri.scales, &ri.sizes};
    bool *pres[3] = {&ri.roi_present, &ri.scales_present, &ri.sizes_present};
    for (int k = 0; k < 3; k++) {
        if (si[k] < 0 || si[k] >= n->n_in || !n->in[si[k]]) continue;
        const dl_value *v = n->in[si[k]];
        if (!v->constant) return "roi, scales or sizes not constant";
        *pres[k] = v->constant->numel > 0;
        *vals[k] = *pres[k] ? v->constant : NULL;
    }
    static _Thread_local char err[200]; /* the message outlives the call */
    if ((e = plan_shape(n, &ri, &p, err, sizeof err))) return e;
    for (int d = 0; d < rank; d++) out[d] = p.out[d], scale[d] = p.scale[d];
    if (!ix || !w) return NULL;
    if (axis < 0 || axis >= rank || p.in[axis] <= 0 || p.out[axis] < 0) return "axis not known";
    *n_taps = p.mode == M_NEAREST ? 1 : p.mode == M_LINEAR ? 2 : 4;
    if (p.out[axis] * *n_taps > cap) return "too many taps";
    axis_taps t = {.ix = ix, .w = w, .outside = dl_malloc((size_t)p.out[axis] + 1)};
    if (!t.outside) return "out of memory";
    axis_fill(&p, axis, &t);
    dl_free(t.outside);
    return NULL;
}

/* ---- GridSample (2-D) ---- */

typedef enum { G_ZEROS, G_BORDER, G_REFLECTION } grid_pad;

static double reflect(double v, double twice_low, double twice_high) {
    if (twice_low == twice_high) return 0;
    double lo = twice_low / 2, span = (twice_high - twice_low) / 2;
    v = fabs(v - lo);
    double extra = fmod(v, span);
    int64_t flips = (int64_t)floor(v / span);
    return flips % 2 == 0 ? extra + lo : span - extra + lo;
}

/* Applies border / reflection padding to a source coordinate (PyTorch semantics). */
static double pad_coord(double c, int64_t size, grid_pad pad, bool align) {
    if (pad == G_BORDER) {
        c = c < 0 ? 0 : c > (double)(size - 1) ? (double)(size - 1) : c;
    } else if (pad == G_REFLECTION) {
        if (align)
            c = reflect(c, 0, 2 * (double)(size - 1));
        else
            c = reflect(c, -1, 2 * (double)size - 1);
        c = c < 0 ? 0 : c > (double)(size - 1) ? (double)(size - 1) : c;
    }
    return c;
}

static const char *grid_attrs(const dl_node *n, int *mode, grid_pad *pad) {
    const char *m = dl_attr_str(n, "mode", "bilinear");
    if (!strcmp(m, "bilinear") || !strcmp(m, "linear"))
        *mode = 1;
    else if (!strcmp(m, "nearest"))
        *mode = 0;
    else if (!strcmp(m, "bicubic") || !strcmp(m, "cubic"))
        *mode = 2;
    else
        return "unsupported mode";
    const char *pm = dl_attr_str(n, "padding_mode", "zeros");
    if (!strcmp(pm, "zeros"))
        *pad = G_ZEROS;
    else if (!strcmp(pm, "border"))
        *pad = G_BORDER;
    else if (!strcmp(pm, "reflection"))
        *pad = G_REFLECTION;
    else
        return "unsupported padding_mode";
    return NULL;
}

static dl_status gridsample_infer(dl_infer *ic) {
    DL_TRY(dl_infer_require_dtype(ic, 0, data_types));
    DL_TRY(dl_infer_require_float(ic, 1));
    int mode;
    grid_pad pad;
    const char *e = grid_attrs(ic->node, &mode, &pad);
    if (e) return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "%s", e);
    const dl_type *x = ic->in[0], *g = ic->in[1];
    if ((x->rank >= 0 && x->rank != 4) || (g->rank >= 0 && g->rank != 4))
        return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "only 2-D GridSample (4-D X and grid)");
    if (g->rank == 4 && g->dims[3] >= 0 && g->dims[3] != 2)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "grid last dim must be 2");
    if (x->rank == 4 && g->rank == 4 && x->dims[0] >= 0 && g->dims[0] >= 0 &&
        x->dims[0] != g->dims[0])
        return dl_infer_fail(ic, DL_ERR_SHAPE, "X and grid batch sizes differ");
    int64_t dims[4];
    dims[0] = x->rank == 4 ? x->dims[0] : g->rank == 4 ? g->dims[0] : dl_infer_fresh_dim(ic);
    dims[1] = x->rank == 4 ? x->dims[1] : dl_infer_fresh_dim(ic);
    dims[2] = g->rank == 4 ? g->dims[1] : dl_infer_fresh_dim(ic);
    dims[3] = g->rank == 4 ? g->dims[2] : dl_infer_fresh_dim(ic);
    return dl_infer_set(ic, 0, x->dtype, 4, dims);
}

/* X value at (n, c, iy, ix), 0 outside. */
static double gs_at(const dl_tensor *x, int64_t base, int64_t H, int64_t W, int64_t iy,
                    int64_t ix) {
    if (iy < 0 || iy >= H || ix < 0 || ix >= W) return 0;
    return dl_get_f64(x, base + iy * W + ix);
}

static dl_status gridsample_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0], *grid = kc->in[1];
    dl_tensor *y = kc->out[0];
    int mode;
    grid_pad pad;
    const char *e = grid_attrs(kc->node, &mode, &pad);
    if (e) return dl_kernel_fail(kc, DL_ERR_UNSUPPORTED, "%s", e);
    bool align = dl_attr_int(kc->node, "align_corners", 0) != 0;
    if (x->rank != 4 || grid->rank != 4 || grid->dims[3] != 2 || grid->dims[0] != x->dims[0] ||
        !y->data || y->rank != 4 || y->dims[0] != x->dims[0] || y->dims[1] != x->dims[1] ||
        y->dims[2] != grid->dims[1] || y->dims[3] != grid->dims[2])
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "inconsistent shapes");
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t Ho = grid->dims[1], Wo = grid->dims[2];
    bool is_float = dl_dtype_is_float(y->dtype);
    for (int64_t n = 0; n < N; n++)
        for (int64_t oy = 0; oy < Ho; oy++)
            for (int64_t ox = 0; ox < Wo; ox++) {
                int64_t gi = ((n * Ho + oy) * Wo + ox) * 2;
                double gx = dl_get_f64(grid, gi), gy = dl_get_f64(grid, gi + 1);
                /* unnormalize to pixel coordinates */
                double fx = align ? (gx + 1) / 2 * (double)(W - 1) : ((gx + 1) * (double)W - 1) / 2;
                double fy = align ? (gy + 1) / 2 * (double)(H - 1) : ((gy + 1) * (double)H - 1) / 2;
                if (!isfinite(fx) || !isfinite(fy)) fx = fy = -2; /* reads zeros / borders */
                for (int64_t c = 0; c < C; c++) {
                    int64_t base = (n * C + c) * H * W;
                    double v = 0;
                    if (mode == 0 || mode == 1) {
                        double px = pad_coord(fx, W, pad, align), py = pad_coord(fy, H, pad, align);
                        if (fabs(px) > 1e15 || fabs(py) > 1e15) px = py = -2;
                        if (mode == 0) {
                            v = gs_at(x, base, H, W, (int64_t)nearbyint(py),
                                      (int64_t)nearbyint(px));
                        } else {
                            double x0 = floor(px), y0 = floor(py), tx = px - x0, ty = py - y0;
                            int64_t ix = (int64_t)x0, iy = (int64_t)y0;
                            v = gs_at(x, base, H, W, iy, ix) * (1 - tx) * (1 - ty) +
                                gs_at(x, base, H, W, iy, ix + 1) * tx * (1 - ty) +
                                gs_at(x, base, H, W, iy + 1, ix) * (1 - tx) * ty +
                                gs_at(x, base, H, W, iy + 1, ix + 1) * tx * ty;
                        }
                    } else {
                        double px = fabs(fx) > 1e15 ? -2 : fx, py = fabs(fy) > 1e15 ? -2 : fy;
                        double x0 = floor(px), y0 = floor(py), cx[4], cy[4];
                        cubic_coeffs(px - x0, -0.75, cx);
                        cubic_coeffs(py - y0, -0.75, cy);
                        for (int j = 0; j < 4; j++)
                            for (int i = 0; i < 4; i++) {
                                double sx = pad_coord(x0 - 1 + i, W, pad, align);
                                double sy = pad_coord(y0 - 1 + j, H, pad, align);
                                v += cx[i] * cy[j] * gs_at(x, base, H, W, (int64_t)sy, (int64_t)sx);
                            }
                    }
                    int64_t yi = ((n * C + c) * Ho + oy) * Wo + ox;
                    if (is_float)
                        dl_set_f64(y, yi, v);
                    else
                        dl_set_i64(y, yi, (int64_t)nearbyint(v));
                }
            }
    return DL_OK;
}

const dl_op_def dl_ops_resize[] = {
    {.name = "Resize",
     .min_in = 1,
     .max_in = 4,
     .min_out = 1,
     .max_out = 1,
     .attrs = resize_attrs,
     .infer = resize_infer,
     .ref = resize_ref},
    {.name = "Upsample",
     .min_in = 1,
     .max_in = 2,
     .min_out = 1,
     .max_out = 1,
     .attrs = upsample_attrs,
     .infer = resize_infer,
     .ref = resize_ref},
    {.name = "GridSample",
     .min_in = 2,
     .max_in = 2,
     .min_out = 1,
     .max_out = 1,
     .attrs = gridsample_attrs,
     .infer = gridsample_infer,
     .ref = gridsample_ref},
    {.name = NULL},
};
