/* cmd-train.c — `dlcc train MODEL.onnx --x X.npy --y Y.npy ...`: trains the model's
 * initializers on .npy data with one compiled program per step, prints progress and per-epoch
 * validation, logs every step as JSON, saves and resumes checkpoints, exports ONNX. The data
 * order and the RNG live in the checkpoint, so a resumed run continues bit-identically. */
#include "cli.h"
#include "../src/train/safetensors.h"
#include "../src/train/train.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Steps a run may ask for (their count is added and multiplied), and the step times kept for the
 * summary's median. */
#define MAX_STEPS ((int64_t)1 << 48)
enum { TIMED_MAX = 1 << 20 };

static const char help[] =
    "usage: dlcc train MODEL.onnx --x X.npy --y Y.npy [options]\n\n"
    "Trains the model's initializers (its weights). The model's first input takes rows of X, its\n"
    "first output is the prediction fed to the loss; Y holds the labels or targets row by row.\n"
    "  --loss L            cross_entropy (default; logits [N, C], integer labels),\n"
    "                      mse, bce_logits\n"
    "  --label-smoothing E cross-entropy label smoothing (default 0)\n"
    "  --optimizer O       sgd (default), adam, adamw\n"
    "  --lr X              learning rate (default 0.01 for sgd, 0.001 otherwise)\n"
    "  --momentum M        SGD momentum (default 0); --nesterov\n"
    "  --weight-decay W    default 0.01 for adamw, else 0\n"
    "  --beta1 B --beta2 B --eps E   Adam(W) (defaults 0.9, 0.999, 1e-8)\n"
    "  --clip-norm X       clip gradients to this global norm\n"
    "  --schedule S        constant (default), step, cosine; --warmup N linear warm-up steps;\n"
    "                      --step-size N --gamma G for step (default: every epoch, 0.1)\n"
    "  --batch N           batch size (default 64); the last partial batch of an epoch is dropped\n"
    "  --epochs N | --steps N   how long (default 1 epoch)\n"
    "  --val-split F       last fraction of the rows held out for validation (default 0.1)\n"
    "  --seed S            shuffling seed (default 0); --no-shuffle keeps file order\n"
    "  --freeze A,B        initializers not to train\n"
    "  --threads N         threads (default: all cores); --backend native|ref\n"
    "  --math fp32|bf16    bf16: mixed precision, the MatMul and Gemm products of the step\n"
    "                      and of its convolutions run as GEMMs (forward and backward), with\n"
    "                      bfloat16 operands and float32 sums; weights, optimizer state and\n"
    "                      the rest in float32 (AVX512-BF16; default fp32)\n"
    "  --checkpoint FILE   save (atomically) after every epoch, every --save-every N steps and\n"
    "                      at the end; --resume continues from FILE when it exists\n"
    "  --stop-after N      stop after N steps of this run (schedules still span the whole run;\n"
    "                      the checkpoint is saved first), to be continued with --resume\n"
    "  --export OUT.onnx   write the trained model\n"
    "  --log FILE.jsonl    one line per step: {\"step\":N,\"loss\":X,\"lr\":Y,\"ms\":T}\n"
    "  --quiet             no progress bar or per-epoch lines\n"
    "  --profile           at the end, time each kernel of the step program on the last batch\n"
    "                      (the table of dlcc profile; the weights are not updated by it)\n";

enum { SCHEDULE_CONSTANT, SCHEDULE_STEP, SCHEDULE_COSINE };

typedef struct train_args {
    const char *model, *x, *y, *ckpt, *export_path, *log, *freeze;
    int schedule; /* SCHEDULE_* */
    dl_train_options o;
    dl_hparams hp;
    int threads, quiet, resume, shuffle, save_every, profile, math;
    int64_t batch, epochs, steps, warmup, step_size, stop_after;
    double val_split, gamma;
    uint64_t seed;
} train_args;

/* ---- random numbers: xoshiro256**, seeded through splitmix64 (state saved in checkpoints) ---- */
static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}
static uint64_t next_u64(uint64_t *s) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}
static void seed_rng(uint64_t *s, uint64_t seed) {
    for (int i = 0; i < 4; i++) {
        uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        s[i] = z ^ (z >> 31);
    }
}
static void shuffle(int64_t *order, int64_t n, uint64_t *rng) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(next_u64(rng) % (uint64_t)(i + 1));
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static double lr_at(const train_args *a, int64_t step, int64_t total, int64_t per_epoch) {
    double base = a->hp.lr;
    if (a->warmup > 0 && step < a->warmup) return base * (double)(step + 1) / (double)a->warmup;
    if (a->schedule == SCHEDULE_STEP) {
        int64_t size = a->step_size > 0 ? a->step_size : per_epoch;
        return base * pow(a->gamma, (double)(step / (size > 0 ? size : 1)));
    }
    if (a->schedule == SCHEDULE_COSINE) {
        int64_t span = total - a->warmup, at = step - a->warmup;
        if (span <= 0) return base;
        return base * 0.5 * (1 + cos(M_PI * (double)at / (double)span));
    }
    return base;
}

/* The index of value among the n names; -1 after an error naming them all. */
static int train_choice(const char *what, const char *value, const char *const *names, int n) {
    char list[128] = "";
    for (int i = 0; i < n; i++) {
        if (strcmp(value, names[i]) == 0) return i;
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, names[i], sizeof list - strlen(list) - 1);
    }
    cli_error("train: unknown %s '%s' (%s)", what, value, list);
    return -1;
}

static int parse_num(const char *opt, const char *v, double lo, double *out) {
    char *end = NULL;
    double d = v ? strtod(v, &end) : NAN;
    if (!v || end == v || *end || !isfinite(d) || d < lo)
        return cli_error("train: %s needs a number >= %g, got '%s'", opt, lo, v ? v : "") + 1;
    *out = d;
    return 0;
}

static int parse_int(const char *opt, const char *v, int64_t lo, int64_t *out) {
    char *end = NULL;
    long long d = v ? strtoll(v, &end, 10) : 0;
    if (!v || end == v || *end || d < lo)
        return cli_error("train: %s needs an integer >= %lld, got '%s'", opt, (long long)lo,
                         v ? v : "") +
               1;
    *out = d;
    return 0;
}

static int parse_args(int argc, char **argv, train_args *a) {
    dl_train_options_init(&a->o);
    a->batch = 64;
    a->val_split = 0.1;
    a->shuffle = 1;
    a->gamma = 0.1;
    const char *opt = "sgd", *loss = "cross_entropy", *backend = "native", *schedule = "constant";
    int64_t k;
    dl_hparams h = {0};
    double lr = -1, mom = 0, wd = -1, b1 = 0.9, b2 = 0.999, eps = 1e-8, clip = -1, ls = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int rc = 0;
#define OPT(name) ((v = cli_opt(argc, argv, &i, name)) != NULL)
        if (cli_is_help(argv[i])) {
            fputs(help, stdout);
            return -1;
        } else if (OPT("--x"))
            a->x = v;
        else if (OPT("--y"))
            a->y = v;
        else if (OPT("--loss"))
            loss = v;
        else if (OPT("--optimizer"))
            opt = v;
        else if (OPT("--lr"))
            rc = parse_num("--lr", v, 0, &lr);
        else if (OPT("--momentum"))
            rc = parse_num("--momentum", v, 0, &mom);
        else if (OPT("--weight-decay"))
            rc = parse_num("--weight-decay", v, 0, &wd);
        else if (OPT("--beta1"))
            rc = parse_num("--beta1", v, 0, &b1);
        else if (OPT("--beta2"))
            rc = parse_num("--beta2", v, 0, &b2);
        else if (OPT("--eps"))
            rc = parse_num("--eps", v, 0, &eps);
        else if (OPT("--clip-norm"))
            rc = parse_num("--clip-norm", v, 0, &clip);
        else if (OPT("--label-smoothing"))
            rc = parse_num("--label-smoothing", v, 0, &ls);
        else if (OPT("--schedule"))
            schedule = v;
        else if (OPT("--warmup"))
            rc = parse_int("--warmup", v, 0, &a->warmup);
        else if (OPT("--step-size"))
            rc = parse_int("--step-size", v, 1, &a->step_size);
        else if (OPT("--gamma"))
            rc = parse_num("--gamma", v, 0, &a->gamma);
        else if (OPT("--batch"))
            rc = parse_int("--batch", v, 1, &a->batch);
        else if (OPT("--epochs"))
            rc = parse_int("--epochs", v, 1, &a->epochs);
        else if (OPT("--steps"))
            rc = parse_int("--steps", v, 1, &a->steps);
        else if (OPT("--stop-after"))
            rc = parse_int("--stop-after", v, 1, &a->stop_after);
        else if (OPT("--val-split"))
            rc = parse_num("--val-split", v, 0, &a->val_split);
        else if (OPT("--seed")) {
            rc = parse_int("--seed", v, 0, &k);
            a->seed = (uint64_t)k;
        } else if (OPT("--freeze"))
            a->freeze = v;
        else if (OPT("--threads"))
            rc = cli_threads(v, &a->threads);
        else if (OPT("--math"))
            rc = cli_math("train", v, &a->math);
        else if (OPT("--backend"))
            backend = v;
        else if (OPT("--checkpoint"))
            a->ckpt = v;
        else if (OPT("--save-every")) {
            rc = parse_int("--save-every", v, 1, &k);
            a->save_every = (int)(k > 1000000000 ? 1000000000 : k);
        } else if (OPT("--export"))
            a->export_path = v;
        else if (OPT("--log"))
            a->log = v;
        else if (strcmp(argv[i], "--nesterov") == 0)
            a->o.nesterov = 1;
        else if (strcmp(argv[i], "--no-shuffle") == 0)
            a->shuffle = 0;
        else if (strcmp(argv[i], "--resume") == 0)
            a->resume = 1;
        else if (strcmp(argv[i], "--quiet") == 0)
            a->quiet = 1;
        else if (strcmp(argv[i], "--profile") == 0)
            a->profile = 1;
        else if (argv[i][0] == '-')
            return cli_error("train: unknown option '%s' (see dlcc train --help)", argv[i]) + 1;
        else if (!a->model)
            a->model = argv[i];
        else
            return cli_error("train: unexpected argument '%s'", argv[i]) + 1;
#undef OPT
        if (rc) return rc;
    }
    if (!a->model || !a->x || !a->y) {
        fputs(help, stderr);
        return 2;
    }
    static const char *const optimizers[] = {"sgd", "adam", "adamw"};
    static const dl_optimizer_kind optimizer_of[] = {DL_OPT_SGD, DL_OPT_ADAM, DL_OPT_ADAMW};
    static const char *const losses[] = {"cross_entropy", "mse", "bce_logits"};
    static const dl_loss_kind loss_of[] = {DL_LOSS_CROSS_ENTROPY, DL_LOSS_MSE, DL_LOSS_BCE_LOGITS};
    static const char *const backends[] = {"native", "ref"};
    static const dl_backend backend_of[] = {DL_BACKEND_NATIVE, DL_BACKEND_REF};
    static const char *const schedules[] = {"constant", "step", "cosine"};
    int k_opt, k_loss, k_backend; /* the first unknown name stops here */
    if ((k_opt = train_choice("optimizer", opt, optimizers, 3)) < 0 ||
        (k_loss = train_choice("loss", loss, losses, 3)) < 0 ||
        (k_backend = train_choice("backend", backend, backends, 2)) < 0 ||
        (a->schedule = train_choice("schedule", schedule, schedules, 3)) < 0)
        return 2;
    a->o.optimizer = optimizer_of[k_opt];
    a->o.loss = loss_of[k_loss];
    a->o.backend = backend_of[k_backend];
    if (a->math != DL_MATH_FP32 && a->o.backend == DL_BACKEND_REF)
        return cli_error("train: --math chooses compiled kernels: it does not apply to --backend "
                         "ref") +
               1;
    if (a->epochs && a->steps) return cli_error("train: give --epochs or --steps, not both") + 1;
    if (a->val_split >= 1) return cli_error("train: --val-split must be below 1") + 1;
    if (a->resume && !a->ckpt) return cli_error("train: --resume needs --checkpoint FILE") + 1;
    if (mom > 0 && a->o.optimizer != DL_OPT_SGD)
        return cli_error("train: --momentum is for sgd (Adam has --beta1)") + 1;
    if (a->o.nesterov && mom <= 0) return cli_error("train: --nesterov needs --momentum > 0") + 1;
    if (b1 >= 1 || b2 >= 1) return cli_error("train: --beta1/--beta2 must be below 1") + 1;
    if (ls > 1) return cli_error("train: --label-smoothing must be at most 1") + 1;
    if (ls > 0 && a->o.loss != DL_LOSS_CROSS_ENTROPY)
        return cli_error("train: --label-smoothing is for cross_entropy") + 1;
    dl_hparams_init(&h, a->o.optimizer);
    h.lr = (float)(lr >= 0 ? lr : a->o.optimizer == DL_OPT_SGD ? 0.01 : 0.001);
    h.momentum = (float)mom;
    if (wd >= 0) h.weight_decay = (float)wd;
    h.beta1 = (float)b1;
    h.beta2 = (float)b2;
    h.eps = (float)eps;
    h.label_smoothing = (float)ls;
    if (clip >= 0) {
        a->o.clip = 1;
        h.max_grad_norm = (float)clip;
    }
    a->o.momentum = mom > 0;
    a->hp = h;
    if (!a->epochs && !a->steps) a->epochs = 1;
    return 0;
}

/* ---- data ---- */

typedef struct data {
    dl_tensor *x, *y;
    int64_t rows, n_train, n_val;
    size_t x_row, y_row; /* bytes per row */
} data;

static int load_data(dl_ctx *ctx, const train_args *a, data *d) {
    if (dl_npy_load(ctx, a->x, &d->x) != DL_OK || dl_npy_load(ctx, a->y, &d->y) != DL_OK)
        return cli_error("%s", dl_errmsg(ctx));
    if (d->x->rank < 1 || d->y->rank < 1 || d->x->dims[0] != d->y->dims[0])
        return cli_error("train: X and Y must have the same number of rows (axis 0): %lld vs %lld",
                         (long long)(d->x->rank ? d->x->dims[0] : 0),
                         (long long)(d->y->rank ? d->y->dims[0] : 0));
    d->rows = d->x->dims[0];
    d->n_val = (int64_t)floor((double)d->rows * a->val_split);
    d->n_train = d->rows - d->n_val;
    if (d->n_train < a->batch)
        return cli_error("train: %lld training rows, fewer than one batch of %lld",
                         (long long)d->n_train, (long long)a->batch);
    d->x_row = d->x->nbytes / (size_t)d->rows;
    d->y_row = d->y->nbytes / (size_t)d->rows;
    return 0;
}

/* A tensor of `count` rows shaped like src's rows. */
static dl_status rows_tensor(dl_ctx *ctx, const dl_tensor *src, int64_t count, dl_tensor **out) {
    int64_t dims[DL_MAX_RANK];
    memcpy(dims, src->dims, sizeof(int64_t) * (size_t)src->rank);
    dims[0] = count;
    return dl_tensor_new(ctx, src->dtype, src->rank, dims, out);
}

static void gather_rows(const dl_tensor *src, size_t row, const int64_t *idx, int64_t n,
                        dl_tensor *dst) {
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)dst->data + (size_t)i * row, (const char *)src->data + (size_t)idx[i] * row,
               row);
}

/* Validation loss (row-weighted mean) and accuracy (cross-entropy: argmax; bce: sign; else NaN). */
static int validate(dl_ctx *ctx, dl_trainer *t, const train_args *a, const data *d, double *loss,
                    double *acc) {
    *loss = 0;
    *acc = NAN;
    int64_t right = 0;
    for (int64_t at = d->n_train; at < d->rows;) {
        int64_t n = d->rows - at < a->batch ? d->rows - at : a->batch;
        dl_tensor *bx = NULL, *by = NULL, *pred = NULL;
        float l = 0;
        dl_status s = rows_tensor(ctx, d->x, n, &bx);
        if (s == DL_OK) s = rows_tensor(ctx, d->y, n, &by);
        if (s == DL_OK) {
            memcpy(bx->data, (char *)d->x->data + (size_t)at * d->x_row, (size_t)n * d->x_row);
            memcpy(by->data, (char *)d->y->data + (size_t)at * d->y_row, (size_t)n * d->y_row);
            s = dl_trainer_eval(ctx, t, bx, by, &l, &pred);
        }
        if (s == DL_OK && a->o.loss == DL_LOSS_CROSS_ENTROPY) {
            int64_t c = pred->rank == 2 ? pred->dims[1] : 1, rows = pred->numel / (c ? c : 1);
            for (int64_t r = 0; r < rows; r++) {
                int64_t am = 0;
                for (int64_t j = 1; j < c; j++)
                    if (dl_get_f64(pred, r * c + j) > dl_get_f64(pred, r * c + am)) am = j;
                right += am == (int64_t)dl_get_f64(by, r);
            }
        } else if (s == DL_OK && a->o.loss == DL_LOSS_BCE_LOGITS) {
            for (int64_t r = 0; r < pred->numel; r++)
                right += (dl_get_f64(pred, r) > 0) == (dl_get_f64(by, r) > 0.5);
        }
        dl_tensor_free(bx);
        dl_tensor_free(by);
        dl_tensor_free(pred);
        if (s != DL_OK) return cli_error("validation: %s", dl_errmsg(ctx));
        *loss += (double)l * (double)n;
        at += n;
    }
    if (d->n_val > 0) *loss /= (double)d->n_val;
    if (a->o.loss == DL_LOSS_CROSS_ENTROPY) {
        int64_t labels = d->y->numel / d->rows * d->n_val;
        *acc = labels ? (double)right / (double)labels : NAN;
    } else if (a->o.loss == DL_LOSS_BCE_LOGITS) {
        int64_t vals = d->y->numel / d->rows * d->n_val;
        *acc = vals ? (double)right / (double)vals : NAN;
    }
    return 0;
}

/* ---- checkpoints: the trainer's tensors plus the data order and RNG state ---- */

static int save_ckpt(dl_ctx *ctx, dl_trainer *t, const train_args *a, const int64_t *order,
                     int64_t n_order, const uint64_t *rng) {
    dl_tensor *ord = NULL, *st = NULL;
    int64_t four = 4;
    dl_status s = dl_tensor_wrap(ctx, DL_I64, 1, &n_order, (void *)order, &ord);
    if (s == DL_OK) s = dl_tensor_wrap(ctx, DL_U64, 1, &four, (void *)rng, &st);
    const char *names[2] = {"data_order", "rng_state"};
    const dl_tensor *ts[2] = {ord, st};
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, a->seed);
    const char *k[1] = {"train.seed"}, *v[1] = {seed};
    if (s == DL_OK) s = dl_trainer_save(ctx, t, a->ckpt, 2, names, ts, 1, k, v);
    dl_tensor_free(ord);
    dl_tensor_free(st);
    if (s != DL_OK) return cli_error("saving checkpoint: %s", dl_errmsg(ctx));
    return 0;
}

static int load_ckpt(dl_ctx *ctx, dl_trainer *t, const train_args *a, int64_t *order,
                     int64_t n_order, uint64_t *rng) {
    dl_st_file *f = NULL;
    if (dl_trainer_load(ctx, t, a->ckpt, &f) != DL_OK)
        return cli_error("resume: %s", dl_errmsg(ctx));
    const dl_tensor *ord = dl_st_find(f, "extra/data_order"),
                    *st = dl_st_find(f, "extra/rng_state");
    int rc = 0;
    if (!ord || ord->dtype != DL_I64 || ord->numel != n_order || !st || st->dtype != DL_U64 ||
        st->numel != 4) {
        rc = cli_error("resume: checkpoint '%s' has no data order for %lld training rows (another "
                       "data set or --val-split?)",
                       a->ckpt, (long long)n_order);
    } else {
        for (int64_t i = 0; i < n_order && !rc; i++) {
            int64_t r = ((const int64_t *)ord->data)[i];
            if (r < 0 || r >= n_order)
                rc = cli_error("resume: checkpoint '%s': bad data order", a->ckpt);
            order[i] = r;
        }
        memcpy(rng, st->data, sizeof(uint64_t) * 4);
    }
    dl_st_free(f);
    return rc;
}

/* ---- the loop ---- */

static void progress(const train_args *a, int64_t epoch, int64_t epochs, int64_t pos,
                     int64_t per_epoch, double loss, double rate) {
    if (a->quiet || !isatty(2)) return;
    int width = 24, fill = per_epoch ? (int)(width * pos / per_epoch) : width;
    char bar[32];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[width] = 0;
    fprintf(stderr, "\repoch %lld/%lld [%s] %lld/%lld loss %.4f  %.0f samples/s ",
            (long long)epoch + 1, (long long)epochs, bar, (long long)pos, (long long)per_epoch,
            loss, rate);
    fflush(stderr);
}

static int cmp_double(const void *p, const void *q) {
    double a = *(const double *)p, b = *(const double *)q;
    return (a > b) - (a < b);
}

int cmd_train(int argc, char **argv) {
    train_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    dl_ctx *ctx = dl_ctx_new();
    dl_graph *g = NULL;
    dl_trainer *t = NULL;
    data d = {0};
    int64_t *order = NULL;
    double *times = NULL;
    FILE *log = NULL;
    char *frozen_buf = NULL;
    const char *frozen[256];
    dl_tensor *bx = NULL, *by = NULL;
    rc = 1;
    if (!ctx) return cli_error("out of memory");
    if (dl_load_onnx(ctx, a.model, &g) != DL_OK) {
        cli_error("%s", dl_errmsg(ctx));
        goto done;
    }
    if (load_data(ctx, &a, &d)) goto done;
    if (a.freeze) {
        frozen_buf = strdup(a.freeze);
        char *save = NULL;
        for (char *tok = strtok_r(frozen_buf, ",", &save); tok && a.o.n_frozen < 256;
             tok = strtok_r(NULL, ",", &save)) {
            if (!dl_graph_find_value(g, tok)) {
                cli_error("train: --freeze: the model has no initializer '%s'", tok);
                goto done;
            }
            frozen[a.o.n_frozen++] = tok;
        }
        a.o.frozen = frozen;
    }
    dl_compile_options co;
    dl_compile_options_init(&co);
    co.threads = a.threads;
    co.math = a.math;
    a.o.compile = &co;
    double t0 = cli_now();
    if (dl_trainer_new(ctx, g, &a.o, &t) != DL_OK) {
        cli_error("%s: %s", a.model, dl_errmsg(ctx));
        goto done;
    }
    int64_t per_epoch = d.n_train / a.batch;
    if (a.steps > MAX_STEPS) {
        cli_error("--steps %lld is too many (at most %lld)", (long long)a.steps,
                  (long long)MAX_STEPS);
        goto done;
    }
    if (!a.steps && per_epoch > 0 && a.epochs > MAX_STEPS / per_epoch) {
        cli_error("--epochs %lld is too many (at most %lld steps)", (long long)a.epochs,
                  (long long)MAX_STEPS);
        goto done;
    }
    int64_t total = a.steps ? a.steps : a.epochs * per_epoch;
    int64_t epochs = (total + per_epoch - 1) / per_epoch;
    if (!a.quiet)
        fprintf(stderr,
                "%s: %d parameter tensors, %lld training rows, %lld validation rows, "
                "%lld steps per epoch (compiled in %.1f s)\n",
                a.model, dl_trainer_num_params(t), (long long)d.n_train, (long long)d.n_val,
                (long long)per_epoch, cli_now() - t0);
    order = malloc(sizeof(int64_t) * (size_t)d.n_train);
    /* the summary's median is over the first TIMED_MAX steps of the run */
    times = malloc(sizeof(double) * (size_t)((total < TIMED_MAX ? total : TIMED_MAX) + 1));
    if (!order || !times) {
        cli_error("out of memory");
        goto done;
    }
    uint64_t rngs[4];
    seed_rng(rngs, a.seed);
    for (int64_t i = 0; i < d.n_train; i++) order[i] = i;
    int64_t step = 0;
    bool resumed = false;
    if (a.resume && access(a.ckpt, F_OK) == 0) {
        if (load_ckpt(ctx, t, &a, order, d.n_train, rngs)) goto done;
        step = dl_trainer_steps(t);
        resumed = true;
        if (!a.quiet) fprintf(stderr, "resumed from %s at step %lld\n", a.ckpt, (long long)step);
    } else if (a.resume && !a.quiet) {
        fprintf(stderr, "%s does not exist yet: starting from the model's weights\n", a.ckpt);
    }
    if (a.log && !(log = fopen(a.log, resumed ? "a" : "w"))) {
        cli_error("cannot write the log '%s'", a.log);
        goto done;
    }
    if (rows_tensor(ctx, d.x, a.batch, &bx) != DL_OK ||
        rows_tensor(ctx, d.y, a.batch, &by) != DL_OK) {
        cli_error("%s", dl_errmsg(ctx));
        goto done;
    }
    double epoch_loss = 0, t_epoch = cli_now();
    int64_t epoch_steps = 0, timed = 0;
    for (; step < total; step++) {
        int64_t epoch = step / per_epoch, pos = step % per_epoch;
        /* a new epoch draws its order now (from the previous one), so a checkpoint taken inside
         * it holds that order and resuming there needs no shuffle */
        if (pos == 0 && a.shuffle) shuffle(order, d.n_train, rngs);
        gather_rows(d.x, d.x_row, order + pos * a.batch, a.batch, bx);
        gather_rows(d.y, d.y_row, order + pos * a.batch, a.batch, by);
        dl_hparams hp = a.hp;
        hp.lr = (float)lr_at(&a, step, total, per_epoch);
        float loss = 0;
        double ts = cli_now();
        if (dl_train_step(ctx, t, bx, by, &hp, &loss) != DL_OK) {
            if (!a.quiet && isatty(2)) fputc('\n', stderr);
            cli_error("step %lld: %s", (long long)step + 1, dl_errmsg(ctx));
            goto done;
        }
        double ms = (cli_now() - ts) * 1e3;
        if (timed < TIMED_MAX) times[timed] = ms;
        timed++;
        if (log) {
            fprintf(log, "{\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"ms\":%.4f}\n",
                    (long long)step + 1, loss, hp.lr, ms);
            fflush(log);
        }
        epoch_loss += loss;
        epoch_steps++;
        double el = cli_now() - t_epoch;
        progress(&a, epoch, epochs, pos + 1, per_epoch, epoch_loss / (double)epoch_steps,
                 el > 0 ? (double)(epoch_steps * a.batch) / el : 0);
        bool end_epoch = pos + 1 == per_epoch || step + 1 == total;
        bool stop = a.stop_after && timed >= a.stop_after;
        if (a.ckpt && (end_epoch || stop || (a.save_every && (step + 1) % a.save_every == 0)))
            if (save_ckpt(ctx, t, &a, order, d.n_train, rngs)) goto done;
        if (end_epoch) {
            double vl = NAN, va = NAN;
            if (d.n_val > 0 && validate(ctx, t, &a, &d, &vl, &va)) goto done;
            if (!a.quiet) {
                if (isatty(2)) fputc('\n', stderr);
                printf("epoch %lld/%lld train_loss=%.6f", (long long)epoch + 1, (long long)epochs,
                       epoch_loss / (double)epoch_steps);
                if (d.n_val > 0) printf(" val_loss=%.6f", vl);
                if (!isnan(va)) printf(" val_acc=%.4f", va);
                printf("\n");
                fflush(stdout);
            }
            epoch_loss = 0;
            epoch_steps = 0;
            t_epoch = cli_now();
        }
        if (stop) break;
    }
    if (a.profile &&
        dl_trainer_profile(ctx, t, bx, by, &a.hp,
                           getenv("DLCC_PROFILE_TOP") ? atoi(getenv("DLCC_PROFILE_TOP")) : 30,
                           stdout) != DL_OK) {
        cli_error("profile: %s", dl_errmsg(ctx));
        goto done;
    }
    if (a.export_path && dl_trainer_export_onnx(ctx, t, a.export_path) != DL_OK) {
        cli_error("export: %s", dl_errmsg(ctx));
        goto done;
    }
    if (!a.quiet && timed > 0) {
        const int64_t kept = timed < TIMED_MAX ? timed : TIMED_MAX;
        qsort(times, (size_t)kept, sizeof *times, cmp_double);
        fprintf(stderr, "%lld steps, median step %.3f ms%s%s\n", (long long)timed, times[kept / 2],
                a.export_path ? "; exported " : "", a.export_path ? a.export_path : "");
    }
    rc = 0;
done:
    if (log) fclose(log);
    dl_tensor_free(bx);
    dl_tensor_free(by);
    dl_tensor_free(d.x);
    dl_tensor_free(d.y);
    free(order);
    free(times);
    free(frozen_buf);
    dl_trainer_free(t);
    dl_graph_free(g);
    dl_ctx_free(ctx);
    return rc;
}
