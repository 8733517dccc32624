/* train.h — training internals: the training graph built from a model (train-graph.c) and the
 * trainer that runs it step by step (trainer.c), checkpoints (checkpoint.c). */
#ifndef DL_TRAIN_H
#define DL_TRAIN_H

#include "../ir/ir-impl.h"

/* Runtime hyper-parameter inputs of the step program, in this order when present. */
typedef enum dl_hp_kind {
    DL_HP_LR = 0,
    DL_HP_MOMENTUM,
    DL_HP_WEIGHT_DECAY,
    DL_HP_BETA1,
    DL_HP_BETA2,
    DL_HP_EPS,
    DL_HP_MAX_NORM,
    DL_HP_LABEL_SMOOTHING,
    DL_HP_STEP, /* the 1-based step number (Adam's bias corrections) */
    DL_HP_COUNT
} dl_hp_kind;

extern const char *const dl_hp_names[DL_HP_COUNT];

/* A model turned into a training step (or an evaluation) graph.
 * Step graph inputs:  x, y, params[0..n_params), states[0..n_states), buffers, hparams (hp[]
 *                     order).
 * Step graph outputs: loss, new params, new states, new buffers (same order).
 * Eval graph inputs:  x, y, params, buffers, hparams; outputs: loss, prediction. */
typedef struct dl_train_graph {
    dl_graph *g;
    int n_params;
    const char **param_names; /* graph arena */
    int states_per_param;     /* SGD with momentum 1, Adam(W) 2, else 0 */
    int n_buffers;            /* BatchNormalization running statistics (not trained) */
    const char **buffer_names;
    int n_hp;
    dl_hp_kind hp[DL_HP_COUNT];
    dl_value *pred; /* the model's prediction inside g */
    int64_t n_classes; /* cross-entropy: C; else 0 */
} dl_train_graph;

/* Builds the step graph (eval = false) or the evaluation graph (eval = true) from a copy of
 * model (weights borrowed: model must outlive it). */
dl_status dl_train_graph_build(dl_ctx *ctx, dl_graph *model, const dl_train_options *o, bool eval,
                               dl_train_graph *out);
void dl_train_graph_free(dl_train_graph *tg);

/* Trainer internals that checkpoints read and restore (trainer.c): its tensors in the step's
 * output order (parameters, optimizer state, buffers), each a slot and a checkpoint name
 * ("param/W", "state1/W", "buffer/bn.running_mean"; dl_malloc'd, NULL on OOM). */
int dl_trainer_num_tensors(const dl_trainer *t);
dl_tensor **dl_trainer_slot(dl_trainer *t, int i);
char *dl_trainer_slot_name(const dl_trainer *t, int i);
void dl_trainer_set_steps(dl_trainer *t, int64_t steps);
const dl_train_options *dl_trainer_options(const dl_trainer *t);

/* Times the step program's kernels on one batch (warm-up + 5 runs, weights not updated) and
 * prints the per-kernel table of `dlcc profile` (top rows; file: FILE*). Native backend only. */
dl_status dl_trainer_profile(dl_ctx *ctx, dl_trainer *t, dl_tensor *x, dl_tensor *y,
                             const dl_hparams *hp, int top, void *file);

/* ---- checkpoints (checkpoint.c) ---- */
typedef struct dl_st_file dl_st_file;
/* Parameters, optimizer state, the step count and the caller's extra tensors ("extra/NAME")
 * and metadata, atomically into one safetensors file. */
dl_status dl_trainer_save(dl_ctx *ctx, dl_trainer *t, const char *path, int n_extra,
                          const char *const *extra_names, const dl_tensor *const *extra,
                          int n_meta, const char *const *keys, const char *const *vals);
/* Restores what dl_trainer_save wrote (all or nothing); *rest receives the file for the
 * caller's extras (dl_st_find(rest, "extra/NAME"), dl_st_meta), freed with dl_st_free. */
dl_status dl_trainer_load(dl_ctx *ctx, dl_trainer *t, const char *path, dl_st_file **rest);

#endif
