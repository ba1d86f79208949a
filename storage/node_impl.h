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
    /* Releases the backend's part of one node (not its children). For the
     * root it is called last, after all descendants. */
    void (*destroy)(node *n);
} node_ops;

typedef struct node_child_link {
    struct node_child_link *next;
    node *child;
} node_child_link;

struct node {
    const node_ops *ops;
    node *parent;            /* NULL for the root */
    node *root;
    char *name;
    char *path;
    node_info info;
    json_t *attrs;           /* owned; {} when none */
    void *impl;              /* the backend's own state */
    pthread_mutex_t lock;    /* guards children */
    node_child_link *children;
};

/* Allocates a node (info zeroed, attrs = {}), to be filled by the backend.
 * parent NULL makes a root. Returns NULL when out of memory. */
node *node_new(const node_ops *ops, node *parent, const char *name);

/* Product of the counts of a selection over ndim dims, with overflow check;
 * -1 on overflow. */
int64_t node_sel_count(const dim_sel *sel, int ndim);

#endif
