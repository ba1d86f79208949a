/* For backends only: how a backend plugs into storage/node.h. */
#ifndef CELLAR_NODE_IMPL_H
#define CELLAR_NODE_IMPL_H

#include <pthread.h>

#include "storage/node.h"

typedef struct node_ops {
    /* Opens a direct child of a group as a new node made with node_new.
     * CELLAR_ENOTFOUND when absent. */
    int (*open_child)(node *parent, const char *name, node **out, cellar_error *err);
    int (*list_children)(node *n, arena *a, const char ***names, size_t *count,
                         cellar_error *err);
    int (*read)(node *n, const dim_sel *sel, void *out, size_t out_bytes, cellar_error *err);
    int (*read_strings)(node *n, const dim_sel *sel, arena *a, char **out,
                        cellar_error *err);
    /* Optional (NULL: never): see node_file_extent. */
    int (*file_extent)(node *n, int *fd, uint64_t *offset, uint64_t *length);
    /* Optional (NULL: never): see node_stream_string. */
    int (*stream_string)(node *n, size_t piece, node_string_sink sink, void *ctx,
                         cellar_error *err);
    /* Releases the backend's part of one node (not its children). For the
     * root it is called last, after all descendants. */
    void (*destroy)(node *n);
    /* Set by a backend whose nodes change after creation (children added,
     * attributes edited: the unit tests' in-memory trees).  Then
     * node_children lists anew into the caller's arena every time and
     * node_memo builds every time (each value is still freed with the
     * tree). */
    int mutable_nodes;
    /* Set by a backend whose calls all queue behind one process-wide lock
     * (libhdf5's): node.c then times every call into it, so a call stuck
     * inside the library shows (node_locked_backend_busy_seconds). */
    int process_lock;
    /* Set by a backend whose children are looked up only among the names
     * its listing gave (the HDF5 backend: the probe walked exactly those;
     * a name it could not list is never opened by name). */
    int children_by_listing;
} node_ops;

typedef struct node_child_link {
    struct node_child_link *next;
    node *child;
} node_child_link;

typedef struct node_absent {
    struct node_absent *next;
    char *detail;  /* the backend's error detail, replayed */
    char name[];
} node_absent;

typedef struct node_memo_entry {
    struct node_memo_entry *next;
    const void *key;
    void *value;
    void (*free_fn)(void *value);
} node_memo_entry;

struct node {
    const node_ops *ops;
    node *parent;            /* NULL for the root */
    node *root;
    char *name;
    char *path;
    node_info info;
    json_t *attrs;           /* owned; {} when none */
    void *impl;              /* the backend's own state */
    pthread_mutex_t lock;    /* guards children and absent */
    node_child_link *children;
    /* names node_child found absent (a few, NODE_ABSENT_MAX at most):
     * answered again without asking the backend */
    struct node_absent *absent;
    size_t n_absent;
    /* the children listing, made once (list_children) and kept: names and
     * array in listing_arena; guarded by list_lock */
    pthread_mutex_t list_lock;
    int listed;
    const char **listing;
    size_t n_listing;
    arena *listing_arena;
    /* node_memo values; memo_lock is held while one is built */
    pthread_mutex_t memo_lock;
    node_memo_entry *memos;
};

/* Allocates a node (info zeroed, attrs = {}), to be filled by the backend.
 * parent NULL makes a root. Returns NULL when out of memory. */
node *node_new(const node_ops *ops, node *parent, const char *name);

/* Product of the counts of a selection over ndim dims, with overflow check;
 * -1 on overflow. */
int64_t node_sel_count(const dim_sel *sel, int ndim);

/* For a backend's own entry points that do not pass through node.c
 * (opening a file): times the call as node.c times the ops of a backend
 * with process_lock.  node_locked_call_enter returns a slot (or -1) to hand
 * to node_locked_call_leave. */
int node_locked_call_enter(void);
void node_locked_call_leave(int slot);

#endif
