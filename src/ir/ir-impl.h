/* ir-impl.h — the graph IR: typed values with possibly symbolic shapes, nodes with attributes,
 * the graph that owns them. Every stage of dlcc (frontends, passes, interpreter) speaks this. */
#ifndef DL_IR_IMPL_H
#define DL_IR_IMPL_H

#include "../core/core-impl.h"

typedef struct dl_op_def dl_op_def;
typedef struct dl_node dl_node;

/* A dim is an int64: >= 0 is a known size, < 0 is symbol number (-d - 1) of the graph's symbol
 * table. Unknown sizes get a fresh anonymous symbol, so "unknown" is just "symbolic". */
#define DL_DIM_IS_SYM(d) ((d) < 0)
#define DL_RANK_UNKNOWN (-1)

typedef struct dl_type {
    dl_dtype dtype;
    int rank; /* DL_RANK_UNKNOWN when not known */
    int64_t dims[DL_MAX_RANK];
} dl_type;

struct dl_value {
    const char *name;
    dl_type type;
    dl_node *producer;     /* NULL for graph inputs and constants */
    int producer_slot;     /* output index on producer */
    dl_tensor *constant;   /* initializer / Constant data, owned by the graph; NULL otherwise */
    bool is_input;         /* graph input (runtime-bound) */
    bool is_output;        /* graph output */
    bool is_initializer;   /* a model initializer (not a Constant node's value): what training
                              may treat as a parameter */
    int id;                /* index in graph->values */
    dl_graph *graph;
};

typedef enum dl_attr_type {
    DL_ATTR_UNDEFINED = 0,
    DL_ATTR_FLOAT,
    DL_ATTR_INT,
    DL_ATTR_STRING,
    DL_ATTR_TENSOR,
    DL_ATTR_GRAPH,
    DL_ATTR_FLOATS,
    DL_ATTR_INTS,
    DL_ATTR_STRINGS,
    DL_ATTR_TENSORS,
    DL_ATTR_GRAPHS,
    DL_ATTR_TYPE_COUNT
} dl_attr_type;

typedef struct dl_attr {
    const char *name;
    dl_attr_type type;
    int64_t i;
    float f;
    const char *s;     /* NUL-terminated; s_len bytes (strings may hold NULs in ONNX) */
    size_t s_len;
    dl_tensor *t;      /* owned by the graph */
    int n;             /* element count of a list */
    int64_t *ints;
    float *floats;
    const char **strings;
    dl_tensor **tensors;
} dl_attr;

struct dl_node {
    const char *name;
    const dl_op_def *op;
    int opset;          /* opset version of the op's domain that the model imports */
    int n_in, n_out;
    dl_value **in;      /* NULL entries are omitted optional inputs */
    dl_value **out;     /* NULL entries are omitted optional outputs */
    int n_attrs;
    dl_attr *attrs;
    int id;
    bool dead; /* removed by a pass; dropped from g->nodes when the pass ends (rewrite.h) */
};

typedef struct dl_ptrvec {
    void **items;
    int len, cap;
} dl_ptrvec;

struct dl_graph {
    dl_ctx *ctx;       /* errors of builder calls go here */
    dl_status status;  /* first builder error */
    dl_arena arena;    /* nodes, values, names, attribute arrays */
    dl_ptrvec values;  /* dl_value* */
    dl_ptrvec nodes;   /* dl_node*, in topological order once verified */
    dl_ptrvec inputs;  /* dl_value* bound at run time */
    dl_ptrvec outputs; /* dl_value* */
    dl_ptrvec tensors; /* dl_tensor* owned by the graph (constants, attribute tensors) */
    dl_ptrvec syms;    /* const char* symbol names */
    dl_value **vindex; /* open-addressing name index over values */
    int vcap;
    const char *name;
    const char *source_path;
    int64_t ir_version;
    int opset;         /* default-domain opset */
    int name_counter;
};

dl_status dl_ptrvec_push(dl_ptrvec *v, void *p);
void dl_ptrvec_free(dl_ptrvec *v);

/* ---- construction (used by frontends and the builder) ---- */
dl_value *dl_graph_find_value(dl_graph *g, const char *name); /* NULL if absent (linear+hash) */
dl_status dl_graph_add_value(dl_graph *g, const char *name, dl_value **out);
/* A fresh unique name like "prefix_12" in the graph arena. */
const char *dl_graph_fresh_name(dl_graph *g, const char *prefix);
int64_t dl_graph_new_sym(dl_graph *g, const char *name); /* returns the negative dim code */
int64_t dl_graph_sym(dl_graph *g, const char *name);     /* finds or creates by name */
const char *dl_graph_sym_name(const dl_graph *g, int64_t dim);
dl_status dl_graph_own_tensor(dl_graph *g, dl_tensor *t); /* frees t on failure */
/* Creates a node with op looked up by (domain, name); outputs must not have producers yet. */
dl_status dl_graph_add_node(dl_graph *g, const char *op_name, const char *domain, int opset,
                            const char *node_name, int n_in, dl_value *const *in, int n_out,
                            dl_value *const *out, int n_attrs, const dl_attr *attrs,
                            dl_node **out_node);
/* dl_add_node with a domain and opset, and attributes both parsed from "k=v" strings and copied
 * from another node of the same graph (a parsed one overrides a copied one of the same name). */
dl_status dl_add_node_ex(dl_graph *g, const char *domain, const char *op_name, int opset, int n_in,
                         dl_value *const *in, int n_out, dl_value **out, int n_attr,
                         const char *const *attrs, int n_copy, const dl_attr *copy);
/* Sorts nodes topologically; error on cycles or values with no producer. */
dl_status dl_graph_toposort(dl_graph *g);
/* Runs static shape/dtype inference over all nodes in order (uses the op table). */
dl_status dl_graph_infer(dl_graph *g);

/* "float32[N,3,224,224]" with symbol names. */
const char *dl_type_str(const dl_graph *g, const dl_type *t, char *buf, size_t n);
/* "node 'conv1' (Conv)" — for error messages. */
const char *dl_node_desc(const dl_node *n, char *buf, size_t len);

/* ---- attribute access (types were checked against the op row at node creation) ---- */
const dl_attr *dl_node_attr(const dl_node *n, const char *name);
int64_t dl_attr_int(const dl_node *n, const char *name, int64_t def);
float dl_attr_float(const dl_node *n, const char *name, float def);
const char *dl_attr_str(const dl_node *n, const char *name, const char *def);
/* Returns the count and sets *vals, or -1 when absent. */
int dl_attr_ints(const dl_node *n, const char *name, const int64_t **vals);
int dl_attr_floats(const dl_node *n, const char *name, const float **vals);
const dl_tensor *dl_attr_tensor(const dl_node *n, const char *name);

#endif
