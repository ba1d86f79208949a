/* The HTTP parsers of common/: Range (one range and several), entity-tag
 * lists and dates, and the cut-character repair of error details. */
#include <stdint.h>
#include <string.h>

#include "common/byte_range.h"
#include "common/error.h"
#include "common/utf8.h"
#include "common/validators.h"
#include "tests/unit/unit.h"

static void check_one(const char *header, uint64_t size, range_kind kind, uint64_t first,
                      uint64_t len)
{
    uint64_t f = 77, l = 77;
    range_kind k = byte_range_parse(header, size, &f, &l);
    CHECK_EQ(k, kind);
    if (k == RANGE_PART && kind == RANGE_PART) {
        CHECK_EQ(f, first);
        CHECK_EQ(l, len);
    }
}

void test_byte_range_one(void)
{
    check_one("bytes=0-9", 100, RANGE_PART, 0, 10);
    check_one("bytes=90-", 100, RANGE_PART, 90, 10);
    check_one("bytes=90-1000", 100, RANGE_PART, 90, 10);
    check_one("bytes=-10", 100, RANGE_PART, 90, 10);
    check_one("bytes=-1000", 100, RANGE_PART, 0, 100);
    check_one("  bytes=5-5 ", 100, RANGE_PART, 5, 1);
    check_one("BYTES=1-2", 100, RANGE_PART, 1, 2);
    check_one("bytes=100-", 100, RANGE_UNSATISFIABLE, 0, 0);
    check_one("bytes=-0", 100, RANGE_UNSATISFIABLE, 0, 0);
    check_one("bytes=0-", 0, RANGE_UNSATISFIABLE, 0, 0);
    check_one("bytes=18446744073709551615-", 100, RANGE_UNSATISFIABLE, 0, 0);
    check_one("bytes=99999999999999999999999-", 100, RANGE_UNSATISFIABLE, 0, 0);
    /* Ignored: another unit, malformed, last before first, several. */
    check_one("items=0-5", 100, RANGE_WHOLE, 0, 0);
    check_one("bytes=9-0", 100, RANGE_WHOLE, 0, 0);
    check_one("bytes=a-b", 100, RANGE_WHOLE, 0, 0);
    check_one("bytes=5", 100, RANGE_WHOLE, 0, 0);
    check_one("bytes=", 100, RANGE_WHOLE, 0, 0);
    check_one("bytes=-", 100, RANGE_WHOLE, 0, 0);
    check_one("bytes=0-1,3-4", 100, RANGE_WHOLE, 0, 0);
}

void test_byte_range_several(void)
{
    byte_parts p;
    CHECK_EQ(byte_ranges_parse("bytes=0-1, 4-5,-3", 100, &p), RANGE_PART);
    CHECK_EQ(p.n, 3);
    CHECK_EQ(p.first[0], 0);
    CHECK_EQ(p.len[0], 2);
    CHECK_EQ(p.first[1], 4);
    CHECK_EQ(p.first[2], 97);
    CHECK_EQ(p.len[2], 3);
    /* Unsatisfiable parts are dropped; none left is a 416. */
    CHECK_EQ(byte_ranges_parse("bytes=0-1,500-", 100, &p), RANGE_PART);
    CHECK_EQ(p.n, 1);
    CHECK_EQ(byte_ranges_parse("bytes=500-,600-", 100, &p), RANGE_UNSATISFIABLE);
    CHECK_EQ(p.n, 0);
    /* One malformed part, an empty one, too many parts, or parts larger
     * together than the body: the whole body, and no parts left behind. */
    CHECK_EQ(byte_ranges_parse("bytes=0-1,a-b", 100, &p), RANGE_WHOLE);
    CHECK_EQ(p.n, 0);
    CHECK_EQ(byte_ranges_parse("bytes=0-1,,4-5", 100, &p), RANGE_WHOLE);
    CHECK_EQ(p.n, 0);
    char many[512] = "bytes=";
    for (int i = 0; i <= BYTE_PARTS_MAX; i++)
        strcat(many, i ? ",0-0" : "0-0");
    CHECK_EQ(byte_ranges_parse(many, 100, &p), RANGE_WHOLE);
    CHECK_EQ(p.n, 0);
    CHECK_EQ(byte_ranges_parse("bytes=0-99,0-99", 100, &p), RANGE_WHOLE);
    CHECK_EQ(p.n, 0);
}

void test_validators(void)
{
    const char *tag = "\"abc-1\"";
    CHECK(etag_list_holds("\"abc-1\"", tag, 0));
    CHECK(etag_list_holds("W/\"abc-1\"", tag, 0));
    CHECK(!etag_list_holds("W/\"abc-1\"", tag, 1)); /* If-Match is strong */
    CHECK(etag_list_holds("\"x\", \"abc-1\"", tag, 1));
    CHECK(etag_list_holds(" * ", tag, 1));
    CHECK(!etag_list_holds("\"abc-12\"", tag, 0));
    CHECK(!etag_list_holds("\"abc\"", tag, 0));
    CHECK(!etag_list_holds("abc-1", tag, 0));
    CHECK(!etag_list_holds("", tag, 0));
    CHECK(!etag_list_holds(NULL, tag, 0));
    CHECK(!etag_list_holds("\"abc-1\"", "W/\"abc-1\"", 1));
    CHECK(etag_list_holds("\"abc-1", "\"abc-1", 0)); /* unterminated: taken to the end */
    time_t t = 0;
    CHECK_EQ(http_date_parse("Sun, 06 Nov 1994 08:49:37 GMT", &t), 0);
    CHECK_EQ((long long)t, 784111777LL);
    char back[64];
    http_date((struct timespec){t, 5}, back, sizeof back);
    CHECK_STR_EQ(back, "Sun, 06 Nov 1994 08:49:37 GMT");
    CHECK_EQ(http_date_parse("yesterday", &t), -1);
    CHECK_EQ(http_date_parse(NULL, &t), -1);
}

void test_error_detail_cut_on_characters(void)
{
    /* utf8_drop_cuts: a character cut short goes; invalid bytes stay. */
    char a[] = "ab\xf0\x9d\x91";                 /* U+1D47B cut after 3 of 4 bytes */
    CHECK_EQ(utf8_drop_cuts(a, strlen(a)), 2);
    CHECK_STR_EQ(a, "ab");
    char b[] = "x\xe2\x82' y";                    /* cut inside, text goes on */
    CHECK_EQ(utf8_drop_cuts(b, strlen(b)), 4);
    CHECK_STR_EQ(b, "x' y");
    char c[] = "\xff\xc3\xa9";                    /* 0xFF is not a cut: stays */
    CHECK_EQ(utf8_drop_cuts(c, strlen(c)), 3);
    char d[] = "\xc0\xaf";                        /* overlong: invalid, not a cut */
    CHECK_EQ(utf8_drop_cuts(d, strlen(d)), 2);
    /* cellar_fail's bound and '%.Ns' both cut on character boundaries. */
    char value[2000] = "";
    for (int i = 0; i < 400; i++)
        strcat(value, "\xf0\x9d\x91\xbb");
    for (int lead = 0; lead < 4; lead++) {
        cellar_error err;
        cellar_error_clear(&err);
        cellar_fail(&err, CELLAR_EINVAL, "%.*s'%.299s'", lead, "abc", value);
        CHECK(utf8_valid(err.detail, strlen(err.detail)));
        cellar_error_clear(&err);
        cellar_fail(&err, CELLAR_EINVAL, "%.*s%s", lead, "abc", value);
        CHECK(utf8_valid(err.detail, strlen(err.detail)));
        CHECK(strlen(err.detail) >= sizeof err.detail - 5);
    }
}
