/* checkpoint.c — a trainer's state in one safetensors file: parameters ("param/NAME"), optimizer
 * state ("stateK/NAME"), the step count and the optimizer in the metadata, plus whatever the
 * caller adds (the CLI: data order and RNG state). The file is written atomically with a
 * checksum (safetensors.c); loading checks that it belongs to this model and optimizer. */
#include "safetensors.h"
#include "train.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static const char *const opt_names[DL_OPT_COUNT] = {"sgd", "adam", "adamw"};

static char *join(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 1;
    char *s = dl_malloc(n);
    if (s) snprintf(s, n, "%s%s", a, b);
    return s;
}

dl_status dl_trainer_save(dl_ctx *ctx, dl_trainer *t, const char *path, int n_extra,
                          const char *const *extra_names, const dl_tensor *const *extra,
                          int n_meta, const char *const *keys, const char *const *vals) {
    if (!t || !path || n_extra < 0 || n_meta < 0 || n_meta > 60)
        return dl_fail(ctx, DL_ERR_INVALID, "dl_trainer_save: bad argument");
    int nt = dl_trainer_num_tensors(t), n = nt + n_extra;
    char **names = dl_calloc((size_t)n + 1, sizeof *names);
    const dl_tensor **ts = dl_calloc((size_t)n + 1, sizeof *ts);
    dl_status s = (names && ts) ? DL_OK : dl_fail(ctx, DL_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && s == DL_OK; i++) {
        names[i] = i < nt ? dl_trainer_slot_name(t, i) : join("extra/", extra_names[i - nt]);
        ts[i] = i < nt ? *dl_trainer_slot(t, i) : extra[i - nt];
        if (!names[i]) s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory");
    }
    const char *mk[64], *mv[64];
    char step[32], npar[32];
    snprintf(step, sizeof step, "%" PRId64, dl_trainer_steps(t));
    snprintf(npar, sizeof npar, "%d", dl_trainer_num_params(t));
    int m = 0;
    mk[m] = "train.step", mv[m++] = step;
    mk[m] = "train.optimizer", mv[m++] = opt_names[dl_trainer_options(t)->optimizer];
    mk[m] = "train.params", mv[m++] = npar;
    for (int i = 0; i < n_meta; i++) mk[m] = keys[i], mv[m++] = vals[i];
    if (s == DL_OK)
        s = dl_st_save(ctx, path, n, (const char *const *)names, ts, m, mk, mv);
    for (int i = 0; names && i < n; i++) dl_free(names[i]);
    dl_free(names);
    dl_free(ts);
    return s;
}

/* The file's tensor for a slot, checked against it: its dtype and shape. */
static dl_status matching(dl_ctx *ctx, const char *path, const dl_st_file *f, const char *name,
                          const dl_tensor *slot, const dl_tensor **src) {
    *src = dl_st_find(f, name);
    if (!*src)
        return dl_fail(ctx, DL_ERR_INVALID, "checkpoint '%s': no tensor '%s' (a checkpoint of "
                       "another model or optimizer?)", path, name);
    bool same = (*src)->dtype == slot->dtype && (*src)->rank == slot->rank;
    for (int d = 0; same && d < slot->rank; d++) same = (*src)->dims[d] == slot->dims[d];
    if (!same)
        return dl_fail(ctx, DL_ERR_SHAPE, "checkpoint '%s': tensor '%s' has another dtype or "
                       "shape than the model's", path, name);
    return DL_OK;
}

dl_status dl_trainer_load(dl_ctx *ctx, dl_trainer *t, const char *path, dl_st_file **rest) {
    if (!t || !path || !rest) return dl_fail(ctx, DL_ERR_INVALID, "dl_trainer_load: bad argument");
    *rest = NULL;
    dl_st_file *f = NULL;
    DL_TRY(dl_st_load(ctx, path, &f));
    dl_status s = DL_OK;
    const char *opt = dl_st_meta(f, "train.optimizer"), *step = dl_st_meta(f, "train.step");
    const char *want = opt_names[dl_trainer_options(t)->optimizer];
    char *end = NULL;
    long long st = step ? strtoll(step, &end, 10) : -1;
    if (!opt || !step || !end || *end || st < 0)
        s = dl_fail(ctx, DL_ERR_PARSE, "checkpoint '%s': not a dlcc training checkpoint", path);
    else if (strcmp(opt, want) != 0)
        s = dl_fail(ctx, DL_ERR_INVALID, "checkpoint '%s' was saved by optimizer %s, this run uses %s",
                    path, opt, want);
    /* every tensor is found and checked before any is copied, so a mismatch half-way leaves
     * the trainer as it was; the copies then cannot fail */
    int nt = dl_trainer_num_tensors(t);
    const dl_tensor **src = dl_calloc((size_t)nt + 1, sizeof *src);
    if (s == DL_OK && !src) s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nt && s == DL_OK; i++) {
        char *nm = dl_trainer_slot_name(t, i);
        s = nm ? matching(ctx, path, f, nm, *dl_trainer_slot(t, i), &src[i])
               : dl_fail(ctx, DL_ERR_NOMEM, "out of memory");
        dl_free(nm);
    }
    if (s == DL_OK) {
        for (int i = 0; i < nt; i++) {
            dl_tensor *slot = *dl_trainer_slot(t, i);
            if (slot->nbytes) memcpy(slot->data, src[i]->data, slot->nbytes);
        }
        dl_trainer_set_steps(t, st);
        *rest = f;
        f = NULL;
    }
    dl_free(src);
    dl_st_free(f);
    return s;
}
