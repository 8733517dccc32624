/* spatial.c — window geometry for Conv, pooling and the quantized convs (see spatial.h). */
#include "spatial.h"

const char *dl_sp_auto_pad(const dl_node *n, dl_auto_pad *ap, char *err, size_t errlen) {
    const char *s = dl_attr_str(n, "auto_pad", "NOTSET");
    if (!strcmp(s, "NOTSET") || !*s)
        *ap = DL_AUTO_PAD_NOTSET;
    else if (!strcmp(s, "SAME_UPPER"))
        *ap = DL_AUTO_PAD_SAME_UPPER;
    else if (!strcmp(s, "SAME_LOWER"))
        *ap = DL_AUTO_PAD_SAME_LOWER;
    else if (!strcmp(s, "VALID"))
        *ap = DL_AUTO_PAD_VALID;
    else {
        snprintf(err, errlen, "unknown auto_pad '%s'", s);
        return err;
    }
    return NULL;
}

const char *dl_sp_read_ints(const dl_node *n, const char *name, int want, int64_t def, int64_t lo,
                            int64_t *out, char *err, size_t errlen) {
    const int64_t *v;
    int cnt = dl_attr_ints(n, name, &v);
    for (int i = 0; i < want; i++) out[i] = def;
    if (cnt < 0) return NULL;
    if (cnt != want) {
        snprintf(err, errlen, "attribute %s has %d values, expected %d", name, cnt, want);
        return err;
    }
    for (int i = 0; i < want; i++) {
        if (v[i] < lo || v[i] >= DL_SP_ATTR_LIMIT) {
            snprintf(err, errlen, "attribute %s[%d] = %lld is out of range", name, i,
                     (long long)v[i]);
            return err;
        }
        out[i] = v[i];
    }
    return NULL;
}

const char *dl_sp_init(dl_window *g, int ns, const int64_t *in, char *err, size_t errlen) {
    memset(g, 0, sizeof *g);
    g->ns = ns;
    for (int d = 0; d < ns; d++) {
        if (in[d] >= DL_SP_ATTR_LIMIT) {
            snprintf(err, errlen, "spatial dim %d (%lld) is too large", d, (long long)in[d]);
            return err;
        }
        g->in[d] = in[d];
        g->out[d] = -1;
    }
    return NULL;
}

const char *dl_sp_read_attrs(const dl_node *n, dl_auto_pad ap, bool dilations, dl_window *g,
                             char *err, size_t errlen) {
    int ns = g->ns;
    int64_t pads[2 * DL_SP_MAX];
    const char *e;
    if ((e = dl_sp_read_ints(n, "strides", ns, 1, 1, g->stride, err, errlen))) return e;
    if (!dilations)
        for (int d = 0; d < ns; d++) g->dil[d] = 1;
    else if ((e = dl_sp_read_ints(n, "dilations", ns, 1, 1, g->dil, err, errlen)))
        return e;
    if ((e = dl_sp_read_ints(n, "pads", 2 * ns, 0, 0, pads, err, errlen))) return e;
    if ((e = dl_sp_read_ints(n, "kernel_shape", ns, -1, 1, g->k, err, errlen))) return e;
    if (ap == DL_AUTO_PAD_NOTSET)
        for (int d = 0; d < ns; d++) {
            g->pb[d] = pads[d];
            g->pe[d] = pads[d + ns];
        }
    return NULL;
}

const char *dl_sp_kernel_from_weight(dl_window *g, const int64_t *wk, char *err, size_t errlen) {
    for (int d = 0; d < g->ns; d++) {
        if (g->k[d] < 0)
            g->k[d] = wk[d];
        else if (wk[d] >= 0 && wk[d] != g->k[d]) {
            snprintf(err, errlen, "kernel_shape[%d] = %lld does not match the weight dim %lld", d,
                     (long long)g->k[d], (long long)wk[d]);
            return err;
        }
        if (g->k[d] >= DL_SP_ATTR_LIMIT) {
            snprintf(err, errlen, "kernel dim %d is too large", d);
            return err;
        }
    }
    return NULL;
}

const char *dl_sp_forward_out(dl_window *g, dl_auto_pad ap, bool ceil_mode, char *err,
                              size_t errlen) {
    for (int d = 0; d < g->ns; d++) {
        g->out[d] = -1;
        if (g->in[d] < 0 || g->k[d] < 0) continue;
        int64_t eff_k = (g->k[d] - 1) * g->dil[d] + 1;
        int64_t in_d = g->in[d], s = g->stride[d];
        if (ap == DL_AUTO_PAD_SAME_UPPER || ap == DL_AUTO_PAD_SAME_LOWER) {
            g->out[d] = (in_d + s - 1) / s;
            int64_t total = (g->out[d] - 1) * s + eff_k - in_d;
            if (total < 0) total = 0;
            g->pb[d] = ap == DL_AUTO_PAD_SAME_UPPER ? total / 2 : total - total / 2;
            g->pe[d] = total - g->pb[d];
            continue;
        }
        int64_t span = in_d + g->pb[d] + g->pe[d] - eff_k;
        if (span < 0) {
            snprintf(err, errlen,
                     "kernel extent %lld exceeds padded input size %lld in spatial dim %d",
                     (long long)eff_k, (long long)(in_d + g->pb[d] + g->pe[d]), d);
            return err;
        }
        if (ceil_mode) {
            g->out[d] = (span + s - 1) / s + 1;
            /* the last window must start inside the input or the leading padding */
            if ((g->out[d] - 1) * s >= in_d + g->pb[d]) g->out[d]--;
        } else {
            g->out[d] = span / s + 1;
        }
    }
    return NULL;
}

bool dl_sp_prod(int n, const int64_t *v, int64_t *out) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) {
        if (v[i] < 0) return false;
        if (v[i] != 0 && p > DL_SP_ELEM_LIMIT / v[i]) return false;
        p *= v[i];
    }
    *out = p;
    return true;
}
