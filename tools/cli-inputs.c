/* cli-inputs.c — binding a model's inputs for the CLI: NAME=FILE.npy options, and random
 * values from a fixed seed for the rest (symbolic dims taken as 1). */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static dl_status random_input(dl_ctx *ctx, dl_value *v, uint64_t *seed, dl_tensor **out) {
    int rank = dl_value_rank(v);
    if (rank < 0) rank = 0;
    int64_t dims[DL_MAX_RANK];
    for (int i = 0; i < rank; i++) {
        int64_t d = dl_value_dim(v, i);
        dims[i] = d >= 0 ? d : 1;
    }
    dl_dtype dt = dl_value_dtype(v);
    dl_status s = dl_tensor_new(ctx, dt, rank, dims, out);
    if (s != DL_OK) return s;
    void *p = dl_tensor_data(*out);
    int64_t n = dl_tensor_numel(*out);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = rng_next(seed);
        double u = (double)(r >> 11) / 9007199254740992.0; /* [0,1) */
        switch (dt) {
        case DL_F32: ((float *)p)[i] = (float)(2 * u - 1); break;
        case DL_F64: ((double *)p)[i] = 2 * u - 1; break;
        case DL_I64: ((int64_t *)p)[i] = (int64_t)(r % 10); break;
        case DL_I32: ((int32_t *)p)[i] = (int32_t)(r % 10); break;
        case DL_BOOL: ((uint8_t *)p)[i] = (uint8_t)(r & 1); break;
        case DL_U8: ((uint8_t *)p)[i] = (uint8_t)r; break;
        case DL_I8: ((int8_t *)p)[i] = (int8_t)(r % 10); break;
        default: break; /* zero-filled */
        }
    }
    return DL_OK;
}

int cli_bind_inputs(dl_ctx *ctx, dl_graph *g, const char *model, int n_spec,
                    const char *const *in_spec, uint64_t seed, int quiet, dl_tensor **inputs) {
    int n_in = dl_graph_num_inputs(g);
    for (int k = 0; k < n_spec; k++) {
        const char *eq = strchr(in_spec[k], '=');
        if (!eq) {
            cli_error("run: --input wants NAME=FILE.npy, got '%s'", in_spec[k]);
            return 1;
        }
        int found = -1;
        for (int i = 0; i < n_in; i++) {
            const char *nm = dl_value_name(dl_graph_input(g, i));
            if (strlen(nm) == (size_t)(eq - in_spec[k]) && strncmp(nm, in_spec[k], (size_t)(eq - in_spec[k])) == 0)
                found = i;
        }
        if (found < 0) {
            cli_error("run: model %s has no input named '%.*s'", model, (int)(eq - in_spec[k]), in_spec[k]);
            return 1;
        }
        dl_tensor_free(inputs[found]);
        if (dl_npy_load(ctx, eq + 1, &inputs[found]) != DL_OK) {
            cli_error("%s", dl_errmsg(ctx));
            return 1;
        }
    }
    const uint64_t seed0 = seed;
    for (int i = 0; i < n_in; i++) {
        if (inputs[i]) continue;
        dl_value *v = dl_graph_input(g, i);
        if (random_input(ctx, v, &seed, &inputs[i]) != DL_OK) {
            cli_error("%s: random value for input '%s': %s", model, dl_value_name(v), dl_errmsg(ctx));
            return 1;
        }
        if (!quiet)
            fprintf(stderr, "dlcc: no --input for '%s': using random %s values (seed %llu)\n",
                    dl_value_name(v), dl_dtype_name(dl_value_dtype(v)), (unsigned long long)seed0);
    }
    return 0;
}
