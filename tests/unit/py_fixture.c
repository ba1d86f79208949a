#include "tests/unit/py_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int py_fixture_run(const char *tag, const char *script, char *dir, size_t dir_size)
{
    snprintf(dir, dir_size, "/tmp/cellar-%s-XXXXXX", tag);
    if (!mkdtemp(dir))
        return -1;
    const char *py = getenv("CELLAR_TEST_PYTHON");
    if (!py)
        py = ".venv/bin/python";
    if (access(py, X_OK) != 0) {
        fprintf(stderr, "%s: no Python at %s (make venv)\n", tag, py);
        return -1;
    }
    char path[512], cmd[1200];
    snprintf(path, sizeof path, "%s/write.py", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(script, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' -W ignore '%s' '%s'", py, path, dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "%s: the fixture script failed\n", tag);
        return -1;
    }
    return 0;
}
