/* registry_get's fast path (no realpath while the file a name reaches keeps
 * its identity): symlinks retargeted inside the root are followed, and a
 * name never escapes the root through a symlink changed after it opened. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/registry.h"
#include "tests/unit/unit.h"

/* A minimal zarr v3 group at dir/name. */
static void make_zarr(const char *dir, const char *name)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/%s/zarr.json", dir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs("{\"zarr_format\": 3, \"node_type\": \"group\", \"attributes\": {}}", f);
        fclose(f);
    }
}

/* registry_get's code, and the store's path when it opened (else ""). */
static int get_path(registry *r, const char *name, char *path, size_t size)
{
    store *s = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    int rc = registry_get(r, name, &s, &err);
    snprintf(path, size, "%s", s ? store_path(s) : "");
    store_release(s);
    return rc;
}

void test_registry_fast_path_symlinks(void)
{
    char dir[] = "/tmp/cellar-regfast-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char root[256], outside[256], p[PATH_MAX], q[PATH_MAX], got[PATH_MAX];
    snprintf(root, sizeof root, "%s/root", dir);
    snprintf(outside, sizeof outside, "%s/outside", dir);
    mkdir(root, 0700);
    mkdir(outside, 0700);
    make_zarr(root, "a.zarr");
    make_zarr(root, "b.zarr");
    make_zarr(outside, "c.zarr");
    snprintf(p, sizeof p, "%s/sub", root);
    mkdir(p, 0700);
    make_zarr(p, "e.zarr");
    make_zarr(outside, "e.zarr");
    snprintf(p, sizeof p, "%s/alias.zarr", root);
    CHECK_EQ(symlink("a.zarr", p), 0);

    registry_config cfg = {.root = root, .max_open_stores = 8, .idle_seconds = 60};
    cellar_error err;
    cellar_error_clear(&err);
    registry *r = registry_new(&cfg, &err);
    CHECK(r != NULL);
    char *real_root = realpath(root, NULL);
    CHECK(real_root != NULL);
    if (!r || !real_root)
        return;

    /* Twice each: the second answer comes from the fast path. */
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(get_path(r, "alias.zarr", got, sizeof got), 0);
        snprintf(q, sizeof q, "%s/a.zarr", real_root);
        CHECK_STR_EQ(got, q);
        CHECK_EQ(get_path(r, "sub/e.zarr", got, sizeof got), 0);
        snprintf(q, sizeof q, "%s/sub/e.zarr", real_root);
        CHECK_STR_EQ(got, q);
    }
    /* Retargeted inside the root: the new target. */
    unlink(p);
    CHECK_EQ(symlink("b.zarr", p), 0);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(get_path(r, "alias.zarr", got, sizeof got), 0);
        snprintf(q, sizeof q, "%s/b.zarr", real_root);
        CHECK_STR_EQ(got, q);
    }
    /* Retargeted outside the root: refused, though a version is open. */
    unlink(p);
    snprintf(q, sizeof q, "%s/c.zarr", outside);
    CHECK_EQ(symlink(q, p), 0);
    CHECK_EQ(get_path(r, "alias.zarr", got, sizeof got), CELLAR_ENOTFOUND);
    CHECK_STR_EQ(got, "");
    /* A folder on the path swapped for a symlink leaving the root. */
    char moved[PATH_MAX];
    snprintf(p, sizeof p, "%s/sub", root);
    snprintf(moved, sizeof moved, "%s/sub-old", root);
    CHECK_EQ(rename(p, moved), 0);
    CHECK_EQ(symlink(outside, p), 0);
    CHECK_EQ(get_path(r, "sub/e.zarr", got, sizeof got), CELLAR_ENOTFOUND);
    CHECK_STR_EQ(got, "");
    /* The folder back: served again. */
    unlink(p);
    CHECK_EQ(rename(moved, p), 0);
    CHECK_EQ(get_path(r, "sub/e.zarr", got, sizeof got), 0);

    registry_free(r);
    free(real_root);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
}
