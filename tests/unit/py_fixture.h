/* Fixtures written at test time by the real writers: a Python script run
 * by the test venv's interpreter (CELLAR_TEST_PYTHON, else .venv/bin/python,
 * `make venv`), as the files cellar serves are written. */
#ifndef CELLAR_TEST_PY_FIXTURE_H
#define CELLAR_TEST_PY_FIXTURE_H

#include <stddef.h>

/* Makes a new directory /tmp/cellar-<tag>-XXXXXX (its path in dir, which
 * has room for dir_size bytes), writes script there as write.py and runs
 * it with the directory as its one argument.  0 when the script exited 0;
 * -1 with a line on stderr otherwise (no Python, the script failed). */
int py_fixture_run(const char *tag, const char *script, char *dir, size_t dir_size);

#endif
