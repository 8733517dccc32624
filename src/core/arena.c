/* arena.c — bump allocator for objects that live exactly as long as their owner (a graph). */
#include "core-impl.h"

struct dl_arena_block {
    dl_arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

#define ARENA_BLOCK (64 * 1024)

void *dl_arena_alloc(dl_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    dl_arena_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        b = dl_malloc(sizeof(dl_arena_block) + cap);
        if (!b) return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *dl_arena_strdup(dl_arena *a, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = dl_arena_alloc(a, n);
    if (d) memcpy(d, s, n);
    return d;
}

void dl_arena_free(dl_arena *a) {
    dl_arena_block *b = a->head;
    while (b) {
        dl_arena_block *next = b->next;
        dl_free(b);
        b = next;
    }
    a->head = NULL;
}
