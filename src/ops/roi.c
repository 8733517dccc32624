/* roi.c — op family "roi" (rows of the op table): RoiAlign.
 *
 * RoiAlign (opset 10, 16): X [N,C,H,W], rois [R,4] as (x1,y1,x2,y2) in input-scale coordinates,
 * batch_indices [R] → Y [R,C,output_height,output_width]. Each output bin averages (mode avg) or
 * takes the max (mode max) of sampling_ratio² bilinear samples (adaptive ceil(roi/bin) when
 * sampling_ratio is 0). Opset 16 adds coordinate_transformation_mode (default half_pixel, which
 * shifts the roi by -0.5 pixel); opset 10 behaves as output_half_pixel. Max mode follows the
 * onnxruntime / ONNX reference semantics: the max over samples of the largest weighted corner.
 * Computed in double for all float dtypes. */
#include "op-impl.h"

#include <math.h>

static const dl_dtype k_roi_float[] = {DL_F32, DL_F64, DL_F16, DL_BF16, DL_DTYPE_UNDEFINED};
static const dl_dtype k_roi_index[] = {DL_I64, DL_I32, DL_DTYPE_UNDEFINED};

/* Largest sample grid of one output bin (per axis); guards against absurd roi sizes. */
#define ROI_MAX_GRID 65536

typedef struct roi_params {
    bool half_pixel, max_mode;
    int64_t oh, ow, sampling;
    double scale;
} roi_params;

static dl_status roi_read(const dl_node *n, int opset, roi_params *p, const char **bad) {
    const char *ct = dl_attr_str(n, "coordinate_transformation_mode",
                                 opset >= 16 ? "half_pixel" : "output_half_pixel");
    const char *mode = dl_attr_str(n, "mode", "avg");
    *bad = NULL;
    if (strcmp(ct, "half_pixel") == 0)
        p->half_pixel = true;
    else if (strcmp(ct, "output_half_pixel") == 0)
        p->half_pixel = false;
    else {
        *bad = "coordinate_transformation_mode must be \"half_pixel\" or \"output_half_pixel\"";
        return DL_ERR_INVALID;
    }
    if (strcmp(mode, "avg") == 0)
        p->max_mode = false;
    else if (strcmp(mode, "max") == 0)
        p->max_mode = true;
    else {
        *bad = "mode must be \"avg\" or \"max\"";
        return DL_ERR_INVALID;
    }
    p->oh = dl_attr_int(n, "output_height", 1);
    p->ow = dl_attr_int(n, "output_width", 1);
    p->sampling = dl_attr_int(n, "sampling_ratio", 0);
    p->scale = dl_attr_float(n, "spatial_scale", 1.0f);
    if (p->oh < 1 || p->ow < 1 || p->oh > INT32_MAX || p->ow > INT32_MAX) {
        *bad = "output_height and output_width must be in [1, 2^31)";
        return DL_ERR_INVALID;
    }
    if (p->sampling < 0 || p->sampling > ROI_MAX_GRID) {
        *bad = "sampling_ratio must be in [0, 65536]";
        return DL_ERR_INVALID;
    }
    if (!isfinite(p->scale)) {
        *bad = "spatial_scale must be finite";
        return DL_ERR_INVALID;
    }
    return DL_OK;
}

static dl_status infer_roialign(dl_infer *ic) {
    roi_params p;
    const char *bad;
    dl_status s = roi_read(ic->node, ic->opset, &p, &bad);
    if (s != DL_OK) return dl_infer_fail(ic, s, "%s", bad);
    DL_TRY(dl_infer_require_dtype(ic, 0, k_roi_float));
    DL_TRY(dl_infer_require_dtype(ic, 1, k_roi_float));
    DL_TRY(dl_infer_require_dtype(ic, 2, k_roi_index));
    const dl_type *x = ic->in[0], *rois = ic->in[1], *bi = ic->in[2];
    if (rois->dtype != x->dtype)
        return dl_infer_fail(ic, DL_ERR_TYPE, "rois must have the dtype of X");
    if (x->rank >= 0 && x->rank != 4)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "X must be 4-D [N,C,H,W]");
    if (rois->rank >= 0 && rois->rank != 2)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "rois must be 2-D [num_rois,4]");
    if (bi->rank >= 0 && bi->rank != 1)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "batch_indices must be 1-D [num_rois]");
    if (rois->rank == 2 && rois->dims[1] >= 0 && rois->dims[1] != 4)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "rois must have 4 columns");
    int64_t r = -1;
    if (rois->rank == 2 && rois->dims[0] >= 0) r = rois->dims[0];
    if (bi->rank == 1 && bi->dims[0] >= 0) {
        if (r >= 0 && r != bi->dims[0])
            return dl_infer_fail(ic, DL_ERR_SHAPE,
                                 "batch_indices and rois disagree on the number of rois");
        r = bi->dims[0];
    }
    if (r < 0) {
        if (rois->rank == 2)
            r = rois->dims[0];
        else if (bi->rank == 1)
            r = bi->dims[0];
        else
            r = dl_infer_fresh_dim(ic);
    }
    int64_t dims[4] = {r, x->rank == 4 ? x->dims[1] : dl_infer_fresh_dim(ic), p.oh, p.ow};
    return dl_infer_set(ic, 0, x->dtype, 4, dims);
}

/* Bilinear sample at (y, x) of one H×W plane; zero outside [-1, H] × [-1, W]. In max mode the
 * value is the largest weighted corner (onnxruntime semantics), in avg mode their sum. */
static double roi_sample(const dl_tensor *x, int64_t base, int64_t h, int64_t w, double y,
                         double xx, bool max_mode) {
    if (!(y >= -1.0 && y <= (double)h && xx >= -1.0 && xx <= (double)w)) return 0.0;
    if (y <= 0) y = 0;
    if (xx <= 0) xx = 0;
    int64_t y0 = (int64_t)y, x0 = (int64_t)xx, y1, x1;
    if (y0 >= h - 1) {
        y0 = y1 = h - 1;
        y = (double)y0;
    } else {
        y1 = y0 + 1;
    }
    if (x0 >= w - 1) {
        x0 = x1 = w - 1;
        xx = (double)x0;
    } else {
        x1 = x0 + 1;
    }
    double ly = y - (double)y0, lx = xx - (double)x0, hy = 1.0 - ly, hx = 1.0 - lx;
    double v1 = hy * hx * dl_get_f64(x, base + y0 * w + x0);
    double v2 = hy * lx * dl_get_f64(x, base + y0 * w + x1);
    double v3 = ly * hx * dl_get_f64(x, base + y1 * w + x0);
    double v4 = ly * lx * dl_get_f64(x, base + y1 * w + x1);
    if (max_mode) return fmax(fmax(v1, v2), fmax(v3, v4));
    return v1 + v2 + v3 + v4;
}

/* Sample grid size along one axis: sampling_ratio, or ceil(roi / bins) when it is 0. */
static dl_status roi_grid(dl_kernel *kc, const roi_params *p, double roi_len, int64_t bins,
                          int64_t *out) {
    if (p->sampling > 0) {
        *out = p->sampling;
        return DL_OK;
    }
    double g = ceil(roi_len / (double)bins);
    if (g != g) return dl_kernel_fail(kc, DL_ERR_INVALID, "roi coordinates are not finite");
    if (g > ROI_MAX_GRID)
        return dl_kernel_fail(kc, DL_ERR_INVALID, "roi too large for adaptive sampling (grid %g)",
                              g);
    *out = g < 0 ? 0 : (int64_t)g;
    return DL_OK;
}

static dl_status ref_roialign(dl_kernel *kc) {
    roi_params p;
    const char *bad;
    dl_status s = roi_read(kc->node, kc->opset, &p, &bad);
    if (s != DL_OK) return dl_kernel_fail(kc, s, "%s", bad);
    const dl_tensor *x = kc->in[0], *rois = kc->in[1], *bi = kc->in[2];
    if (x->rank != 4 || rois->rank != 2 || rois->dims[1] != 4 || bi->rank != 1 ||
        bi->dims[0] != rois->dims[0])
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "bad input shapes");
    int64_t nb = x->dims[0], c = x->dims[1], h = x->dims[2], w = x->dims[3], nr = rois->dims[0];
    dl_tensor *y = kc->out[0];
    if (!y->data) {
        int64_t dims[4] = {nr, c, p.oh, p.ow};
        DL_TRY(dl_kernel_alloc_out(kc, 0, x->dtype, 4, dims));
        y = kc->out[0];
    }
    if (y->rank != 4 || y->dims[0] != nr || y->dims[1] != c || y->dims[2] != p.oh ||
        y->dims[3] != p.ow)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output shape does not match");
    if (y->numel == 0) return DL_OK;
    for (int64_t r = 0; r < nr; r++) {
        int64_t b = dl_get_i64(bi, r);
        if (b < 0 || b >= nb)
            return dl_kernel_fail(kc, DL_ERR_INVALID,
                                  "batch_indices[%lld] = %lld is out of range [0, %lld)",
                                  (long long)r, (long long)b, (long long)nb);
    }
    if (h == 0 || w == 0) return DL_OK; /* every sample is outside: zeros */
    double off = p.half_pixel ? 0.5 : 0.0;
    for (int64_t r = 0; r < nr; r++) {
        int64_t b = dl_get_i64(bi, r);
        double x1 = dl_get_f64(rois, r * 4 + 0) * p.scale - off;
        double y1 = dl_get_f64(rois, r * 4 + 1) * p.scale - off;
        double x2 = dl_get_f64(rois, r * 4 + 2) * p.scale - off;
        double y2 = dl_get_f64(rois, r * 4 + 3) * p.scale - off;
        double rw = x2 - x1, rh = y2 - y1;
        if (!p.half_pixel) {
            rw = fmax(rw, 1.0);
            rh = fmax(rh, 1.0);
        }
        double bh = rh / (double)p.oh, bw = rw / (double)p.ow;
        int64_t gh, gw;
        DL_TRY(roi_grid(kc, &p, rh, p.oh, &gh));
        DL_TRY(roi_grid(kc, &p, rw, p.ow, &gw));
        if (gh * gw > ((int64_t)1 << 24))
            return dl_kernel_fail(kc, DL_ERR_INVALID, "sample grid %lldx%lld per bin is too large",
                                  (long long)gh, (long long)gw);
        double count = gh * gw > 0 ? (double)(gh * gw) : 1.0;
        for (int64_t ch = 0; ch < c; ch++) {
            int64_t base = (b * c + ch) * h * w;
            int64_t obase = ((r * c + ch) * p.oh) * p.ow;
            for (int64_t ph = 0; ph < p.oh; ph++)
                for (int64_t pw = 0; pw < p.ow; pw++) {
                    double acc = 0.0;
                    bool first = true;
                    for (int64_t iy = 0; iy < gh; iy++) {
                        double sy = y1 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
                        for (int64_t ix = 0; ix < gw; ix++) {
                            double sx = x1 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
                            double v = roi_sample(x, base, h, w, sy, sx, p.max_mode);
                            if (!p.max_mode)
                                acc += v;
                            else if (first || v > acc)
                                acc = v;
                            first = false;
                        }
                    }
                    dl_set_f64(y, obase + ph * p.ow + pw, p.max_mode ? acc : acc / count);
                }
        }
    }
    return DL_OK;
}

static const dl_attr_spec roialign_attrs[] = {{"coordinate_transformation_mode", DL_ATTR_STRING},
                                              {"mode", DL_ATTR_STRING},
                                              {"output_height", DL_ATTR_INT},
                                              {"output_width", DL_ATTR_INT},
                                              {"sampling_ratio", DL_ATTR_INT},
                                              {"spatial_scale", DL_ATTR_FLOAT},
                                              {NULL, 0}};

const dl_op_def dl_ops_roi[] = {
    {.name = "RoiAlign",
     .min_in = 3,
     .max_in = 3,
     .min_out = 1,
     .max_out = 1,
     .attrs = roialign_attrs,
     .infer = infer_roialign,
     .ref = ref_roialign},
    {.name = NULL},
};
