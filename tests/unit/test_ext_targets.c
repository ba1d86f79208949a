/* storage/ext_targets: where libhdf5 will find each other file a store
 * names, and which of them a version follows. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/ext_targets.h"
#include "tests/unit/unit.h"

static void touch(const char *dir, const char *name)
{
    char p[2 * PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs("x", f);
        fclose(f);
    }
}

void test_ext_targets_resolve(void)
{
    char tmpl[] = "/tmp/cellar-ext-XXXXXX";
    char *base = mkdtemp(tmpl);
    CHECK(base != NULL);
    char real_base[PATH_MAX], root[PATH_MAX + 64], study[PATH_MAX + 128], shared[PATH_MAX + 128],
        store[PATH_MAX + 256], outside[PATH_MAX + 64], refs[4 * PATH_MAX];
    CHECK(realpath(base, real_base) != NULL && strlen(real_base) < 512);
    real_base[511] = '\0';
    snprintf(root, sizeof root, "%s/root", real_base);
    snprintf(study, sizeof study, "%s/study", root);
    snprintf(shared, sizeof shared, "%s/shared", root);
    snprintf(outside, sizeof outside, "%s/outside", real_base);
    snprintf(store, sizeof store, "%s/s.h5ad", study);
    mkdir(root, 0700);
    mkdir(study, 0700);
    mkdir(shared, 0700);
    mkdir(outside, 0700);
    touch(study, "s.h5ad");
    touch(study, "near.h5");
    touch(study, "raw bin");
    touch(shared, "far.h5");
    touch(outside, "secret.h5");
    mkdir(strcat(strcpy(refs, study), "/dir.h5"), 0700);
    snprintf(refs, sizeof refs,
             "l near.h5\nl ../shared/far.h5\nl %s/secret.h5\nl /nowhere/near.h5\n"
             "r raw%%20bin\nl missing.h5\nl dir.h5\nv .\nv %s/near.h5\n",
             outside, study);
    ext_targets *t = ext_targets_new(root, store, 0);
    CHECK(t != NULL);
    CHECK_EQ(ext_targets_add(t, store, refs, 0), 0);
    const ext_target *e = ext_targets_find(t, study, EXT_LINK, "near.h5");
    CHECK(e && !e->why && e->exists && !e->probed);
    char want[2 * PATH_MAX];
    snprintf(want, sizeof want, "%s/near.h5", study);
    CHECK_STR_EQ(e->path, want);
    e = ext_targets_find(t, study, EXT_LINK, "../shared/far.h5");
    CHECK(e && e->why && strstr(e->why, "outside the store's folder"));
    snprintf(want, sizeof want, "%s/secret.h5", outside);
    e = ext_targets_find(t, study, EXT_LINK, want);
    CHECK(e && e->why && strstr(e->why, "outside the data root"));
    /* a missing absolute name: its last component beside the file, as
     * libhdf5 looks for it */
    e = ext_targets_find(t, study, EXT_LINK, "/nowhere/near.h5");
    snprintf(want, sizeof want, "%s/near.h5", study);
    CHECK(e && !e->why);
    CHECK_STR_EQ(e->path, want);
    e = ext_targets_find(t, study, EXT_RAW, "raw bin");
    CHECK(e && !e->why && e->probed); /* plain bytes: no probe */
    e = ext_targets_find(t, study, EXT_LINK, "missing.h5");
    CHECK(e && e->why && strstr(e->why, "does not exist"));
    e = ext_targets_find(t, study, EXT_LINK, "dir.h5");
    CHECK(e && e->why && strstr(e->why, "not a regular file"));
    CHECK(ext_targets_find(t, study, EXT_VIRTUAL, ".") == NULL);
    snprintf(want, sizeof want, "%s/near.h5", study);
    e = ext_targets_find(t, study, EXT_VIRTUAL, want);
    CHECK(e && !e->why);
    /* probing: a refusal is kept, a pass adds the target's own names */
    ext_target *next = ext_targets_next_unprobed(t);
    CHECK(next != NULL);
    int64_t at = 0;
    CHECK_EQ(ext_targets_changed(t, &at), 0);
    uint64_t h1 = ext_targets_hash(t);
    CHECK(h1 != 0);
    CHECK_EQ(ext_targets_probed(t, next, CELLAR_EFORMAT, "store 'near.h5' could not be read safely",
                                NULL),
             0);
    CHECK(next->why && strstr(next->why, "could not be read safely"));
    while ((next = ext_targets_next_unprobed(t)) != NULL)
        CHECK_EQ(ext_targets_probed(t, next, 0, "", "l far.h5\n"), 0);
    /* far.h5 named by near.h5 is looked for beside near.h5 */
    CHECK(ext_targets_find(t, study, EXT_LINK, "far.h5") != NULL);
    /* a changed target is noticed */
    touch(study, "near.h5x");
    char p[2 * PATH_MAX], q[2 * PATH_MAX];
    snprintf(p, sizeof p, "%s/near.h5x", study);
    snprintf(q, sizeof q, "%s/near.h5", study);
    CHECK_EQ(rename(p, q), 0);
    CHECK_EQ(ext_targets_changed(t, &at), 1);
    CHECK(at > 0);
    ext_targets_free(t);
    /* with the flag, the whole root */
    t = ext_targets_new(root, store, 1);
    CHECK_EQ(ext_targets_add(t, store, "l ../shared/far.h5\n", 0), 0);
    e = ext_targets_find(t, study, EXT_LINK, "../shared/far.h5");
    CHECK(e && !e->why);
    ext_targets_free(t);
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", real_base);
    CHECK_EQ(system(cmd), 0);
}
