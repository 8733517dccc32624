/* fuzz_onnx.c — libFuzzer harness for the ONNX frontend, the printers and the reference interpreter.
 *
 * Each input is written to a temp file and loaded with dl_load_onnx (the public entry point reads a
 * path); a model that loads is printed (text and DOT, to /dev/null) and, when its inputs are small,
 * run once on deterministic pseudo-random inputs. Single allocations are capped at 64 MiB
 * (dl_set_alloc_limit) so a model asking for a huge tensor fails with DL_ERR_LIMIT instead of
 * exhausting the fuzzer's memory. Set DLCC_FUZZ_NO_RUN=1 to only load and print.
 *
 * Build (from the repository root, after `make` has generated build/gen/onnx.pb-c.c and
 * build/gen/rt-files.c; the sources under src/kernels/rt are #included by src/kernels/rt-lib.c,
 * so only the library's top-level directories are compiled, as the Makefile does):
 *   clang -g -O1 -std=c11 -D_DEFAULT_SOURCE -D_FILE_OFFSET_BITS=64 \
 *       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
 *       -Iinclude -Ibuild/gen tests/robust/fuzz_onnx.c $(find src -maxdepth 2 -name '*.c') \
 *       build/gen/onnx.pb-c.c build/gen/rt-files.c -lprotobuf-c -lm -o /tmp/fuzz_onnx
 * Run, seeded with some ONNX test models (the corpus folder collects new inputs):
 *   D=/usr/share/libonnx-testdata/data/node; mkdir -p /tmp/fuzz-corpus
 *   for t in test_conv_with_strides_padding test_gemm_default_matrix_bias test_gather_0; do
 *       cp $D/$t/model.onnx /tmp/fuzz-corpus/$t.onnx; done
 *   /tmp/fuzz_onnx -max_total_time=180 -timeout=20 -rss_limit_mb=4096 -max_len=4096 \
 *       /tmp/fuzz-corpus
 * Reproduce a crash: /tmp/fuzz_onnx crash-<sha1>   (or: build/dlcc run crash-<sha1>)
 */
#include "dlcc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_RUN_ELEMS ((int64_t)1 << 16) /* skip running models with larger graph inputs */

static char tmp_path[64];
static int no_run;

static void init(void) {
    snprintf(tmp_path, sizeof tmp_path, "/tmp/dlcc-fuzz-%ld.onnx", (long)getpid());
    dl_set_alloc_limit((size_t)64 << 20);
    const char *e = getenv("DLCC_FUZZ_NO_RUN");
    no_run = e && e[0] == '1';
}

static uint64_t rng(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static void fill(dl_tensor *t, uint64_t *seed) {
    void *p = dl_tensor_data(t);
    int64_t n = dl_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = rng(seed);
        switch (dl_tensor_dtype(t)) {
        case DL_F32: ((float *)p)[i] = (float)((double)(r % 2001) / 1000.0 - 1.0); break;
        case DL_F64: ((double *)p)[i] = (double)(r % 2001) / 1000.0 - 1.0; break;
        case DL_I64: ((int64_t *)p)[i] = (int64_t)(r % 4); break;
        case DL_I32: ((int32_t *)p)[i] = (int32_t)(r % 4); break;
        case DL_I8: ((int8_t *)p)[i] = (int8_t)(r % 4); break;
        case DL_U8: ((uint8_t *)p)[i] = (uint8_t)r; break;
        case DL_BOOL: ((uint8_t *)p)[i] = (uint8_t)(r & 1); break;
        default: break; /* left zero */
        }
    }
}

static void run_once(dl_ctx *ctx, dl_graph *g) {
    int n_in = dl_graph_num_inputs(g), n_out = dl_graph_num_outputs(g);
    if (n_in < 0 || n_out < 0 || n_in > 64 || n_out > 64) return;
    dl_tensor *in[65] = {0}, *out[65] = {0};
    uint64_t seed = 42;
    int ok = 1;
    for (int i = 0; i < n_in && ok; i++) {
        dl_value *v = dl_graph_input(g, i);
        int rank = dl_value_rank(v);
        if (rank < 0) rank = 0;
        if (rank > DL_MAX_RANK) {
            ok = 0;
            break;
        }
        int64_t dims[DL_MAX_RANK], n = 1;
        for (int d = 0; d < rank; d++) {
            int64_t x = dl_value_dim(v, d);
            dims[d] = x >= 0 ? x : 1;
            if (dims[d] > MAX_RUN_ELEMS) dims[d] = MAX_RUN_ELEMS + 1;
            n *= dims[d];
            if (n > MAX_RUN_ELEMS) ok = 0;
        }
        if (!ok) break;
        if (dl_tensor_new(ctx, dl_value_dtype(v), rank, dims, &in[i]) != DL_OK) {
            ok = 0;
            break;
        }
        fill(in[i], &seed);
    }
    if (ok && dl_run(ctx, g, DL_BACKEND_REF, n_in, NULL, in, out) == DL_OK) {
        for (int i = 0; i < n_out; i++) {
            if (!out[i]) continue;
            /* touch every output byte so a short buffer shows up under ASan */
            volatile unsigned char sink = 0;
            const unsigned char *b = dl_tensor_data(out[i]);
            size_t bytes = (size_t)dl_tensor_numel(out[i]) * dl_dtype_size(dl_tensor_dtype(out[i]));
            for (size_t k = 0; b && k < bytes; k++) sink ^= b[k];
            (void)sink;
        }
    }
    for (int i = 0; i < n_in; i++) dl_tensor_free(in[i]);
    for (int i = 0; i < n_out; i++) dl_tensor_free(out[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tmp_path[0]) init();
    FILE *f = fopen(tmp_path, "wb");
    if (!f) return 0;
    if (size && fwrite(data, 1, size, f) != size) {
        fclose(f);
        return 0;
    }
    fclose(f);

    dl_ctx *ctx = dl_ctx_new();
    if (!ctx) return 0;
    dl_graph *g = NULL;
    if (dl_load_onnx(ctx, tmp_path, &g) == DL_OK && g) {
        FILE *null = fopen("/dev/null", "w");
        if (null) {
            dl_graph_print(g, null, 1);
            fclose(null);
        }
        dl_graph_write_dot(g, "/dev/null");
        if (!no_run) run_once(ctx, g);
    } else {
        /* an error must come with a message */
        const char *m = dl_errmsg(ctx);
        if (!m || !m[0]) __builtin_trap();
    }
    dl_graph_free(g);
    dl_ctx_free(ctx);
    return 0;
}
