/* module.c — assembles the generated translation unit (see module.h). */
#include "module.h"
#include "loop-ir.h"

static bool generated(const dl_group *gr) {
    return gr->kind != DL_G_VIEW && gr->kind != DL_G_FALLBACK;
}

/* The weight-packing interface (module.h): which constant each pack reads, its size, and the
 * packing itself, done by this module's code so the layout matches its microkernel. */
static void emit_packs(dl_sbuf *sb, const dl_packs *pk) {
    dl_sb_printf(sb, "const int dlk_n_packs = %d;\nconst int dlk_pack_src[%d] = {", pk->n,
                 pk->n > 0 ? pk->n : 1);
    for (int i = 0; i < pk->n; i++) dl_sb_printf(sb, "%s%d", i ? ", " : "", pk->items[i].src);
    dl_sb_printf(sb, "%s};\nstatic const int64_t dlk_pack_args[%d][6] = {", pk->n ? "" : "0",
                 pk->n > 0 ? pk->n : 1);
    for (int i = 0; i < pk->n; i++) {
        const dl_pack_req *r = &pk->items[i];
        dl_sb_printf(sb, "%s{%d, %lld, %lld, %lld, %d, %lld}", i ? ", " : "", r->operand,
                     (long long)r->lines, (long long)r->K, (long long)r->ld, r->trans,
                     (long long)r->offset);
    }
    dl_sb_printf(sb, "%s};\n", pk->n ? "" : "{0}");
    /* a[0] is a GEMM operand (0, 1, DLRT_B_PAIRS, DLRT_A_PAIRS) or a Winograd packing mode
     * (DLRT_WG_PACKED ... DLRT_WG2_PACKED_T) */
    dl_sb_put(sb,
              "int64_t dlk_pack_bytes(int k) {\n"
              "    const int64_t *a = dlk_pack_args[k];\n"
              "    if (dlrt_conv_winograd_tile((int)a[0]))\n"
              "        return (int64_t)dlrt_conv_winograd_packed_bytes((int)a[0], a[1], a[2]);\n"
              "    return (int64_t)dlrt_gemm_packed_bytes((int)a[0], a[1], a[2]);\n}\n"
              "void dlk_pack(int k, const void *src, void *dst) {\n"
              "    const int64_t *a = dlk_pack_args[k];\n"
              "    if (dlrt_conv_winograd_tile((int)a[0]))\n"
              "        dlrt_conv_winograd_pack((int)a[0], a[1], a[2], (const float *)src, "
              "(float *)dst);\n"
              "    else\n"
              "        dlrt_gemm_pack_operand((int)a[0], a[1], a[2], (const float *)src + a[5], "
              "a[3], (int)a[4], (float *)dst);\n}\n\n");
}

dl_status dl_module_emit(dl_ctx *ctx, dl_graph *g, dl_fusion *f, const dl_target *t, dl_sbuf *sb,
                         int *n_generated, dl_sbuf *notes) {
    dl_render_prelude(sb);
    dl_sb_put(sb, "#include \"dlrt.h\"\n#include \"vecmath.h\"\n");
    dl_sb_printf(sb, "#define DLK_WS %d\n#define DLK_ERR %d\n#define DLK_PACK %d\n\n",
                 dl_slot_ws(g), dl_slot_err(g), dl_slot_pack(g, 0));
    dl_packs packs = {0};
    int count = 0;
    for (int gi = 0; gi < f->n; gi++) {
        dl_group *gr = &f->groups[gi];
        if (!generated(gr)) continue;
        char name[32];
        snprintf(name, sizeof name, "dlk_%d", gi);
        dl_sbuf one = {0};
        int packs_before = packs.n;
        dl_status s = dl_emit_group(ctx, gr, t, name, &packs, &one);
        if (s == DL_OK) s = dl_sb_status(ctx, &one);
        if (s == DL_ERR_UNSUPPORTED) {
            char d[300];
            if (notes)
                dl_sb_printf(notes, "%s group at %s runs its reference kernels: %s\n",
                             dl_gkind_name(gr->kind),
                             dl_node_desc(dl_group_anchor(gr), d, sizeof d), dl_errmsg(ctx));
            dl_ctx_clear(ctx);
            dl_sb_free(&one);
            packs.n = packs_before; /* the group's requests go with its code */
            DL_TRY(dl_fusion_split(ctx, f, gi));
            gi += f->groups[gi].n_nodes - 1; /* the split groups are all fallbacks */
            continue;
        }
        if (s != DL_OK) {
            dl_sb_free(&one);
            dl_free(packs.items);
            return s;
        }
        dl_sb_put(sb, dl_sb_str(&one));
        dl_sb_put(sb, "\n");
        dl_sb_free(&one);
        count++;
    }
    emit_packs(sb, &packs);
    dl_free(packs.items);
    dl_sb_printf(sb, "typedef void (*dlk_fn)(void *const *, const int64_t *);\n");
    dl_sb_printf(sb, "const int dlk_n_kernels = %d;\n", f->n);
    dl_sb_printf(sb, "dlk_fn const dlk_kernels[%d] = {\n", f->n > 0 ? f->n : 1);
    for (int gi = 0; gi < f->n; gi++) {
        if (generated(&f->groups[gi]))
            dl_sb_printf(sb, "    dlk_%d,\n", gi);
        else
            dl_sb_put(sb, "    0,\n");
    }
    if (f->n == 0) dl_sb_put(sb, "    0,\n");
    dl_sb_put(sb, "};\n\nvoid dlk_set_threads(int n) {\n    dlrt_set_threads(n);\n}\n");
    /* whether dlrt_sgemm_bf16 computes in bfloat16 as built (the flags decide) */
    dl_sb_put(sb, "int dlk_has_bf16(void) {\n    return dlrt_gemm_has_bf16();\n}\n");
    *n_generated = count;
    return dl_sb_status(ctx, sb);
}
