/* An in-memory node backend for unit tests: build a tree of groups and
 * arrays programmatically, with attributes as JSON, and read it back through
 * storage/node.h exactly as the HDF5 and zarr backends would be read,
 * selections included (slices, steps, negative steps, index lists).
 *
 * Every builder returns the new node (borrowed from the tree, freed by
 * node_tree_free on the root) or NULL when out of memory or when the name is
 * taken.  Builders copy what they are given. */
#ifndef CELLAR_TEST_MEM_NODE_H
#define CELLAR_TEST_MEM_NODE_H

#include <jansson.h>
#include <stdint.h>

#include "storage/node.h"

/* A new root group. */
node *mem_root(void);

/* A child group. */
node *mem_group(node *parent, const char *name);

/* A numeric or bool array (bool: one byte per value, 0 or 1) of `ndim`
 * dimensions (0 = scalar) with values in C order.  data may be NULL for a
 * zero-sized array. */
node *mem_array(node *parent, const char *name, dtype_kind dt, int ndim, const int64_t *shape,
                const void *data);

/* Shorthand for a 1-D array of n values. */
node *mem_array1(node *parent, const char *name, dtype_kind dt, int64_t n, const void *data);

/* A string array of `ndim` dimensions (0 = scalar) with strs in C order. */
node *mem_strings(node *parent, const char *name, int ndim, const int64_t *shape,
                  const char *const *strs);

/* Shorthand for a 1-D string array of n values. */
node *mem_strings1(node *parent, const char *name, int64_t n, const char *const *strs);

/* An array with an HDF5 NULL dataspace (ndim -1), as anndata's `null`. */
node *mem_empty(node *parent, const char *name, dtype_kind dt);

/* Merges the attributes of a JSON object text (e.g. "{\"axis\": 1}") into
 * n's attributes; returns n, or NULL when the text is not a JSON object. */
node *mem_attrs(node *n, const char *json_text);

/* Sets encoding-type and encoding-version; returns n. */
node *mem_enc(node *n, const char *type, const char *version);

/* Values delivered by reads of n so far (to check that a slice read only
 * touches the selected items). */
uint64_t mem_values_read(const node *n);

/* Number of read calls on n so far. */
uint64_t mem_read_calls(const node *n);

#endif
