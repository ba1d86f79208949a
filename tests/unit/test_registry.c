#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/arena.h"
#include "storage/registry.h"
#include "tests/unit/unit.h"

void test_registry_split_name(void)
{
    arena *a = arena_new();
    const char *name = NULL, *rest = NULL;
    CHECK_EQ(registry_split_name("atlas/liver.zarr/mod/rna/obs", a, &name, &rest), 0);
    CHECK_STR_EQ(name, "atlas/liver.zarr");
    CHECK_STR_EQ(rest, "mod/rna/obs");
    CHECK_EQ(registry_split_name("x.h5ad", a, &name, &rest), 0);
    CHECK_STR_EQ(name, "x.h5ad");
    CHECK_STR_EQ(rest, "");
    CHECK_EQ(registry_split_name("folder/only", a, &name, &rest), CELLAR_ENOTFOUND);
    arena_free(a);
}

static int build_count(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    (void)err;
    int *calls = ctx;
    (*calls)++;
    int *v = malloc(sizeof *v);
    *v = 42;
    *value = v;
    *bytes = sizeof *v;
    return 0;
}

static int build_fail(void *ctx, void **value, size_t *bytes, cellar_error *err)
{
    (void)value;
    (void)bytes;
    int *calls = ctx;
    (*calls)++;
    return cellar_fail(err, CELLAR_EFORMAT, "broken");
}

void test_registry_refuses_escapes(void)
{
    char dir[] = "/tmp/cellar-reg-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[512], outside[512];
    snprintf(path, sizeof path, "%s/root", dir);
    mkdir(path, 0700);
    snprintf(outside, sizeof outside, "%s/secret.h5ad", dir);
    FILE *f = fopen(outside, "w");
    fputs("secret", f);
    fclose(f);
    char link[600];
    snprintf(link, sizeof link, "%s/root/link.h5ad", dir);
    CHECK_EQ(symlink(outside, link), 0);
    snprintf(link, sizeof link, "%s/root/notes.h5ad", dir);
    f = fopen(link, "w");
    fputs("not hdf5", f);
    fclose(f);

    registry_config cfg = {.root = path, .max_open_stores = 4, .idle_seconds = 60};
    cellar_error err;
    cellar_error_clear(&err);
    registry *r = registry_new(&cfg, &err);
    CHECK(r != NULL);
    store *s = NULL;
    const char *bad[] = {"../secret.h5ad", "/etc/passwd.h5ad", "link.h5ad", "a/../../secret.h5ad",
                         "./notes.h5ad", "", "missing.h5ad", "notes.txt"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cellar_error_clear(&err);
        CHECK_EQ(registry_get(r, bad[i], &s, &err), CELLAR_ENOTFOUND);
        CHECK(s == NULL);
    }
    cellar_error_clear(&err);
    CHECK_EQ(registry_get(r, "notes.h5ad", &s, &err), CELLAR_EFORMAT);
    arena *a = arena_new();
    store_listing *items = NULL;
    size_t n = 0;
    CHECK_EQ(registry_list(r, a, &items, &n, &err), 0);
    CHECK_EQ(n, 1); /* notes.h5ad only: the escaping link is not listed */
    if (n == 1)
        CHECK_STR_EQ(items[0].name, "notes.h5ad");
    arena_free(a);
    CHECK_EQ(registry_open_count(r), 0);
    registry_free(r);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
    (void)build_count;
    (void)build_fail;
}
