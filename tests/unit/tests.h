/* The list of unit tests, one UNIT_TEST(name) line each; add yours here. */
UNIT_TEST(test_selection_slices)
UNIT_TEST(test_selection_lists)
UNIT_TEST(test_selection_errors)
UNIT_TEST(test_arena_and_buf)
