/* tuning.h — the records `dlcc tune` writes: for a convolution's geometry on an instruction set,
 * the algorithm measured fastest inside a model. They live in a text file, one per line:
 *
 *   conv avx512 n=1 c=64>256 g=1 in=56x56 k=1x1 s=1x1 d=1x1 p=0x0 out=56x56 -> implicit  # note
 *
 * (the key, then the algorithm's name as dlrt_conv_algo_name spells it, or "model" where the
 * measurement kept the cost model's pick; '#' starts a comment, blank lines are ignored).
 * dl_compile reads the file named by its options and writes each matching layer's algorithm
 * into the generated code (dlrt_conv.tuned); layers without a record, or with "model", keep the
 * cost model's pick. The key holds every field the algorithms' speed depends on and
 * nothing of the thread count: a program's results never depend on how many threads run it. */
#ifndef DL_TUNING_H
#define DL_TUNING_H

#include "../core/core-impl.h"
#include "../kernels/rt/dlrt.h"
#include "../passes/fuse.h"

typedef struct dl_tuning dl_tuning;

/* Longest key (dl_tuning_conv_key), line and kept note of a tuning file: a written record (key,
 * algorithm, note) always fits a line, so every file dlcc writes reads back. */
enum { DL_TUNING_KEY_MAX = 256, DL_TUNING_LINE_MAX = 4096, DL_TUNING_NOTE_MAX = 1024 };
/* The "algorithm" of a record that keeps the cost model's pick ("-> model"): its note holds the
 * measured times, and the layer compiles as if it had no record. */
enum { DL_TUNING_MODEL = DLRT_CONV_ALGOS };

dl_tuning *dl_tuning_new(void);
void dl_tuning_free(dl_tuning *t);
/* Reads a tuning file. A missing file is an error unless missing_ok (then *out is empty). A
 * malformed line fails with its number and what was expected. */
dl_status dl_tuning_load(dl_ctx *ctx, const char *path, bool missing_ok, dl_tuning **out);
/* Writes the records (header: comment lines, each without its "# "; may be NULL) to path
 * atomically. */
dl_status dl_tuning_write(dl_ctx *ctx, const dl_tuning *t, const char *path, const char *header);
/* The key of a convolution on instruction set isa ("avx512"...; "avx512+bf16" for a layer with
 * bfloat16 products, p->bf16); a batch p->n of 0 (symbolic) is written "n=*": such a record
 * serves every batch size. */
void dl_tuning_conv_key(const dlrt_conv *p, const char *isa, char *buf, size_t n);
/* The recorded algorithm (DLRT_CONV_*, or DL_TUNING_MODEL) of key, -1 when there is none. */
int dl_tuning_get(const dl_tuning *t, const char *key);
/* Adds or replaces key's record (algo: DLRT_CONV_* or DL_TUNING_MODEL); note (NULL: none) is
 * kept as its comment, cut to DL_TUNING_NOTE_MAX - 1 bytes. */
dl_status dl_tuning_set(dl_ctx *ctx, dl_tuning *t, const char *key, int algo, const char *note);
int dl_tuning_count(const dl_tuning *t);

/* Sets the conv_tuned field of f's CONV groups: with force >= 0, algorithm force on every layer
 * it applies to (how dlcc tune times each algorithm), else each layer's record in t (t may be
 * NULL; "-> model" records set nothing). Depthwise layers (one algorithm) are left to the cost
 * model. Returns how many groups it set. */
int dl_tuning_apply(const dl_tuning *t, int force, dl_fusion *f, const char *isa);
/* The convolution of CONV group gr for keys and tuning, its batch 0 when symbolic (then *n_sym
 * >= 0 is its symbol; may be NULL); false for other groups. */
bool dl_tuning_conv_of(const dl_group *gr, dlrt_conv *p, int *n_sym);
/* The algorithm CONV group gr's kernel runs: its record (conv_tuned) where that applies, else
 * the cost model's pick, on weights packed at load where they are constant floats (emit.c). A
 * symbolic batch takes its size from syms (NULL: 1). -1 for other groups. */
int dl_tuning_conv_algo(const dl_group *gr, const int64_t *syms);

#endif
