/* copy-params.c — what a COPY group moves (Slice, Split, Concat, constant Pad, DepthToSpace,
 * SpaceToDepth: dlrt_copy_strided calls, and a Pad's dlrt_fill; Gather: one dlrt_gather call),
 * shared by kernel selection (whether a node can be one) and the emitter.
 *
 * Split and Concat move [outer, len * inner] blocks, outer and inner the products of the dims
 * before and after the axis, which may be symbols (a dynamic batch): only the axis's extents must
 * be known. Slice moves the output's dims with the input's strides times the steps, from the
 * first index on each axis, all known; Pad fills its output with the constant and moves its input
 * into place (what negative pads leave of it). A Slice or Pad of an input with a symbolic dim
 * stays with the reference kernel, as does any node whose dims inference could not prove equal (a
 * Concat input whose other dims are a symbol where the output's are a number), so no move reads
 * past a buffer. */
#include "emit-params.h"

static bool esize_ok(const dl_value *v) {
    const size_t es = v ? dl_dtype_size(v->type.dtype) : 0;
    return es == 1 || es == 2 || es == 4 || es == 8;
}

/* Whether a and b have the same rank and the same dims (the same number, or the same symbol)
 * everywhere but skip. */
static bool same_dims_but(const dl_value *a, const dl_value *b, int skip) {
    if (a->type.rank != b->type.rank || a->type.dtype != b->type.dtype) return false;
    for (int d = 0; d < a->type.rank; d++)
        if (d != skip && a->type.dims[d] != b->type.dims[d]) return false;
    return true;
}

/* Whether p times the product of v's known nonzero dims [from, to) fits in int64, so that no
 * stride, offset or byte count computed from them here overflows (a model may declare any dims;
 * a 0 dim first would have hid the product of the others, from which the strides are made). */
static bool dims_fit(const dl_value *v, int from, int to, int64_t p) {
    for (int d = from; d < to; d++)
        if (v->type.dims[d] > 0 && __builtin_mul_overflow(p, v->type.dims[d], &p)) return false;
    return true;
}

static bool product_fits(const dl_value *v) {
    return dims_fit(v, 0, v->type.rank, 1);
}

/* Whether v's rank is one dlrt_copy_strided takes and its dims' product fits. */
static bool sizes_ok(const dl_value *v) {
    return v->type.rank >= 1 && v->type.rank <= DLRT_COPY_MAX_RANK && product_fits(v);
}

/* The Split or Concat axis of a node whose joined tensor (Split's input, Concat's output) is v;
 * -1 when invalid. */
static int join_axis(const dl_node *n, const dl_value *v) {
    const int r = v->type.rank;
    int64_t a = dl_attr_int(n, "axis", 0);
    if (a < 0) a += r;
    return r >= 1 && a >= 0 && a < r && v->type.dims[a] >= 0 ? (int)a : -1;
}

/* The parts of a Split (its outputs) or Concat (its inputs) and the joined tensor; false when
 * some part is missing, of another shape off the axis, of unknown extent on it, or the extents
 * do not add up. */
static bool join_parts(const dl_node *n, bool split, const dl_value **whole, int *axis,
                       int *parts) {
    const dl_value *w = split ? n->in[0] : n->out[0];
    const int np = split ? n->n_out : n->n_in;
    if (!w || !sizes_ok(w) || !esize_ok(w) || np < 1) return false;
    const int a = join_axis(n, w);
    if (a < 0) return false;
    int64_t sum = 0;
    for (int k = 0; k < np; k++) {
        const dl_value *p = split ? n->out[k] : n->in[k];
        if (!p || !same_dims_but(p, w, a) || p->type.dims[a] < 0 || !sizes_ok(p)) return false;
        sum += p->type.dims[a];
    }
    if (sum != w->type.dims[a]) return false;
    *whole = w, *axis = a, *parts = np;
    return true;
}

/* A DepthToSpace or SpaceToDepth node moving between a space tensor [N, C, H * b, W * b] and a
 * depth one [N, C * b * b, H, W] (C, H, W known, N a number or a symbol): its block size, its
 * direction and whether the depth side is in CRD order (c * b * b + i * b + j) rather than
 * DCR's ((i * b + j) * C + c); false when the dims are not those or the attributes invalid. */
static bool space_depth(const dl_node *n, int64_t *b, bool *to_space, bool *crd) {
    *to_space = dl_node_is(n, "DepthToSpace");
    if (!*to_space && !dl_node_is(n, "SpaceToDepth")) return false;
    const dl_value *x = n->n_in > 0 ? n->in[0] : NULL, *y = n->n_out > 0 ? n->out[0] : NULL;
    if (!x || !y || x->type.rank != 4 || y->type.rank != 4 || !esize_ok(x) ||
        x->type.dtype != y->type.dtype || !product_fits(x) || !product_fits(y) ||
        x->type.dims[0] != y->type.dims[0])
        return false;
    for (int d = 1; d < 4; d++)
        if (x->type.dims[d] < 0 || y->type.dims[d] < 0) return false;
    *b = dl_attr_int(n, "blocksize", 0);
    const char *mode = *to_space && n->opset >= 11 ? dl_attr_str(n, "mode", "DCR") : "DCR";
    *crd = !strcmp(mode, "CRD");
    if (*b < 1 || *b > 65536 || (!*crd && strcmp(mode, "DCR"))) return false;
    const dl_value *sp = *to_space ? y : x, *dp = *to_space ? x : y;
    const int64_t bb = *b * *b;
    return sp->type.dims[1] * bb == dp->type.dims[1] && sp->type.dims[2] == dp->type.dims[2] * *b &&
           sp->type.dims[3] == dp->type.dims[3] * *b;
}

int dl_copy_moves(const dl_node *n) {
    int64_t b;
    bool to_space, crd;
    if (dl_node_is(n, "DepthToSpace") || dl_node_is(n, "SpaceToDepth"))
        return space_depth(n, &b, &to_space, &crd) ? 1 : -1;
    const bool pad = dl_node_is(n, "Pad"), slice = dl_node_is(n, "Slice");
    if (pad || slice) {
        const dl_value *x = n->in[0], *y = n->out[0];
        if (!x || !y || !sizes_ok(x) || y->type.rank != x->type.rank || !sizes_ok(y) ||
            !esize_ok(x) || x->type.dtype != y->type.dtype || !dl_type_known(&x->type) ||
            !dl_type_known(&y->type))
            return -1;
        /* the output's dims must be what the parameters give (inference says so; checked, so
         * that no copy ever leaves its buffers whatever inference does) */
        const int r = x->type.rank;
        int64_t a[2 * DL_MAX_RANK], b[DL_MAX_RANK];
        uint64_t value;
        if (pad ? !dl_pad_geometry(n, a, &value) : !dl_slice_geometry(n, a, b)) return -1;
        for (int d = 0; d < r; d++) {
            const int64_t xd = x->type.dims[d], yd = y->type.dims[d];
            if (pad) {
                int64_t want;
                if (__builtin_add_overflow(xd, a[d], &want) ||
                    __builtin_add_overflow(want, a[r + d], &want) || want != yd)
                    return -1;
            } else if (yd > 0) { /* the first and the last index read lie in x */
                int64_t last;
                if (__builtin_mul_overflow(yd - 1, b[d], &last) ||
                    __builtin_add_overflow(last, a[d], &last) || a[d] < 0 || a[d] >= xd ||
                    last < 0 || last >= xd)
                    return -1;
            }
        }
        return 1;
    }
    const bool split = dl_node_is(n, "Split");
    if (!split && !dl_node_is(n, "Concat")) return -1;
    const dl_value *w;
    int axis, parts;
    return join_parts(n, split, &w, &axis, &parts) ? parts : -1;
}

static dl_sexpr sx(int64_t c) {
    dl_sexpr e = {.c = c};
    return e;
}

/* e times c. */
static dl_sexpr sx_times(dl_sexpr e, int64_t c) {
    e.c *= c;
    return e;
}

/* A block of static x moved into static y: len[d] elements on each axis from x's start[d] on,
 * step[d] apart, to y's at[d] on, one apart; its dims of size 1 dropped and runs contiguous on
 * both sides merged (rank 0 when a len is 0). */
static void block_move(const dl_value *x, const dl_value *y, const int64_t *start,
                       const int64_t *step, const int64_t *at, const int64_t *len,
                       dl_copy_move *m) {
    int64_t xs[DL_MAX_RANK], ys[DL_MAX_RANK];
    const int r = x->type.rank;
    m->esize = (int64_t)dl_dtype_size(x->type.dtype);
    m->src_slot = x->id, m->dst_slot = y->id;
    dl_strides(r, x->type.dims, xs);
    dl_strides(r, y->type.dims, ys);
    int64_t so = 0, dof = 0, dims[DL_MAX_RANK], ss[DL_MAX_RANK], ds[DL_MAX_RANK];
    int k = 0;
    for (int d = 0; d < r; d++) {
        if (len[d] <= 0) { /* nothing to move */
            m->rank = 0;
            return;
        }
        so += start[d] * xs[d], dof += at[d] * ys[d];
        if (len[d] == 1) continue;
        const int64_t s = step[d] * xs[d];
        if (k > 0 && ss[k - 1] == s * len[d] && ds[k - 1] == ys[d] * len[d]) {
            dims[k - 1] *= len[d], ss[k - 1] = s, ds[k - 1] = ys[d];
            continue;
        }
        dims[k] = len[d], ss[k] = s, ds[k] = ys[d];
        k++;
    }
    if (k == 0) dims[0] = 1, ss[0] = ds[0] = 1, k = 1; /* one element */
    m->rank = k;
    for (int d = 0; d < k; d++)
        m->dims[d] = sx(dims[d]), m->ss[d] = sx(ss[d]), m->ds[d] = sx(ds[d]);
    m->src_off = sx(so), m->dst_off = sx(dof);
}

/* The Slice's one move: the whole output. */
static bool slice_move(const dl_node *n, dl_copy_move *m) {
    int64_t start[DL_MAX_RANK], step[DL_MAX_RANK], at[DL_MAX_RANK] = {0};
    if (!dl_slice_geometry(n, start, step)) return false;
    block_move(n->in[0], n->out[0], start, step, at, n->out[0]->type.dims, m);
    return true;
}

/* The Pad's one move: y filled with the constant where pads add (any pad > 0), then the part of
 * x that negative pads leave moved into place. */
static bool pad_move(const dl_node *n, dl_copy_move *m) {
    const dl_value *x = n->in[0], *y = n->out[0];
    const int r = x->type.rank;
    int64_t pads[2 * DL_MAX_RANK], start[DL_MAX_RANK], step[DL_MAX_RANK], at[DL_MAX_RANK],
        len[DL_MAX_RANK];
    if (!dl_pad_geometry(n, pads, &m->fill_value)) return false;
    int64_t numel = 1;
    for (int d = 0; d < r; d++) {
        const int64_t b = pads[d], e = pads[r + d];
        start[d] = b < 0 ? -b : 0, at[d] = b > 0 ? b : 0, step[d] = 1;
        len[d] = x->type.dims[d] - start[d] - (e < 0 ? -e : 0);
        m->fill |= b > 0 || e > 0;
        numel *= y->type.dims[d];
    }
    block_move(x, y, start, step, at, len, m);
    m->fill_count = numel;
    return true;
}

/* The one move of a DepthToSpace or SpaceToDepth: over (n, c, h, i, j, w), element [n][c][h *
 * b + i][w * b + j] of the space tensor and its place in the depth one, w last (contiguous in
 * the depth tensor). */
static bool space_depth_move(const dl_node *n, dl_copy_move *m) {
    int64_t b;
    bool to_space, crd;
    if (!space_depth(n, &b, &to_space, &crd)) return false;
    const dl_value *x = n->in[0], *y = n->out[0], *sp = to_space ? y : x, *dp = to_space ? x : y;
    const int64_t C = sp->type.dims[1], H = dp->type.dims[2], W = dp->type.dims[3];
    const int64_t plane = H * W, sp_row = W * b;
    /* strides of (n, c, h, i, j, w) in each tensor */
    const int64_t ss[6] = {C * b * b * plane, b * b * plane, b * sp_row, sp_row, 1, b};
    const int64_t ds[6] = {C * b * b * plane,
                           crd ? b * b * plane : plane,
                           W,
                           crd ? b * plane : b * C * plane,
                           crd ? plane : C * plane,
                           1};
    const int64_t dims[6] = {0, C, H, b, b, W};
    m->rank = 6;
    for (int d = 0; d < 6; d++) {
        m->dims[d] = d == 0 ? dl_dims_sexpr(x, 0, 1) : sx(dims[d]);
        m->ss[d] = sx(to_space ? ds[d] : ss[d]);
        m->ds[d] = sx(to_space ? ss[d] : ds[d]);
    }
    m->src_slot = x->id, m->dst_slot = y->id;
    m->src_off = m->dst_off = sx(0);
    m->esize = (int64_t)dl_dtype_size(x->type.dtype);
    return true;
}

bool dl_copy_move_of(const dl_node *n, int k, dl_copy_move *m) {
    memset(m, 0, sizeof *m);
    if (dl_node_is(n, "DepthToSpace") || dl_node_is(n, "SpaceToDepth"))
        return k == 0 && space_depth_move(n, m);
    if (dl_node_is(n, "Slice")) return k == 0 && dl_copy_moves(n) == 1 && slice_move(n, m);
    if (dl_node_is(n, "Pad")) return k == 0 && dl_copy_moves(n) == 1 && pad_move(n, m);
    const bool split = dl_node_is(n, "Split");
    const dl_value *w;
    int axis, parts;
    if (!join_parts(n, split, &w, &axis, &parts) || k < 0 || k >= parts) return false;
    const int r = w->type.rank;
    /* part k: its extent on the axis and where it starts there */
    int64_t off = 0;
    for (int j = 0; j < k; j++) off += (split ? n->out[j] : n->in[j])->type.dims[axis];
    const dl_value *p = split ? n->out[k] : n->in[k];
    const int64_t len = p->type.dims[axis], whole = w->type.dims[axis];
    const dl_sexpr inner = dl_dims_sexpr(w, axis + 1, r);
    m->rank = len == 0 ? 0 : 2;
    m->dims[0] = dl_dims_sexpr(w, 0, axis);
    m->dims[1] = sx_times(inner, len);
    /* the part's rows are len * inner apart, the joined tensor's whole * inner */
    m->ss[0] = sx_times(inner, split ? whole : len);
    m->ds[0] = sx_times(inner, split ? len : whole);
    m->ss[1] = m->ds[1] = sx(1);
    m->src_slot = split ? w->id : p->id;
    m->dst_slot = split ? p->id : w->id;
    m->src_off = split ? sx_times(inner, off) : sx(0);
    m->dst_off = split ? sx(0) : sx_times(inner, off);
    m->esize = (int64_t)dl_dtype_size(w->type.dtype);
    return true;
}

bool dl_gather_params_of(const dl_node *n, dl_gather_params *gp) {
    memset(gp, 0, sizeof *gp);
    if (!dl_node_is(n, "Gather") || n->n_in != 2 || n->n_out != 1) return false;
    const dl_value *x = n->in[0], *ix = n->in[1], *y = n->out[0];
    if (!x || !ix || !y || x->type.rank < 1 || !esize_ok(x) || !product_fits(x) ||
        ix->type.rank < 0 || !product_fits(ix) || !product_fits(y) ||
        y->type.dtype != x->type.dtype)
        return false;
    if (ix->type.dtype != DL_I32 && ix->type.dtype != DL_I64) return false;
    const int r = x->type.rank, ir = ix->type.rank;
    int64_t a = dl_attr_int(n, "axis", 0);
    if (a < 0) a += r;
    if (a < 0 || a >= r || y->type.rank != r - 1 + ir) return false;
    /* y's dims are x's before the axis, the indices', then x's after it: the same numbers or
     * symbols, so the rows the call moves are the buffers' */
    for (int d = 0; d < y->type.rank; d++) {
        const int64_t want = d < a        ? x->type.dims[d]
                             : d < a + ir ? ix->type.dims[d - a]
                                          : x->type.dims[d - ir + 1];
        if (y->type.dims[d] != want) return false;
    }
    /* a row's bytes, as the call computes them, must fit too */
    const int64_t esize = (int64_t)dl_dtype_size(x->type.dtype);
    if (!dims_fit(x, (int)a + 1, r, esize)) return false;
    gp->x_slot = x->id, gp->idx_slot = ix->id, gp->y_slot = y->id;
    gp->idx_bytes = (int)dl_dtype_size(ix->type.dtype);
    gp->axis = (int)a;
    gp->outer = dl_dims_sexpr(x, 0, (int)a);
    gp->extent = dl_dims_sexpr(x, (int)a, (int)a + 1);
    gp->count = dl_dims_sexpr(ix, 0, ir);
    gp->row_bytes = sx_times(dl_dims_sexpr(x, (int)a + 1, r), esize);
    return true;
}
