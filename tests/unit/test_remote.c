/* Unit tests of storage/remote/: the ListObjectsV2 parser, S3 key
 * encoding, the remote byte cache, the credentials file and the URLs of
 * S3 objects. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "storage/remote/remote_cache.h"
#include "storage/remote/remote_store.h"
#include "storage/remote/remote_store_impl.h"
#include "storage/remote/s3_list.h"
#include "tests/unit/unit.h"

static const char PAGE1[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>"
    "<Prefix>p/</Prefix><KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys>"
    "<IsTruncated>true</IsTruncated><NextContinuationToken>tok&amp;1</NextContinuationToken>"
    "<Contents><Key>p/s.zarr/zarr.json</Key><LastModified>2026-01-02T03:04:05.000Z</LastModified>"
    "<ETag>&quot;abc&quot;</ETag><Size>120</Size><StorageClass>STANDARD</StorageClass></Contents>"
    "<Contents><Key>p/s.zarr/X/c/0/0</Key><LastModified>2026-01-02T03:04:06Z</LastModified>"
    "<ETag>&#34;def&#34;</ETag><Size>4194304</Size></Contents>"
    "<Contents><Key>p/a &lt;b&gt; &amp; c.h5ad</Key><Size>0</Size></Contents>"
    "</ListBucketResult>";

static const char PAGE2[] =
    "<ListBucketResult><IsTruncated>false</IsTruncated>"
    "<Contents><Key>p/s.zarr/X/zarr.json</Key><Size>7</Size><ETag>\"x\"</ETag></Contents>"
    "</ListBucketResult>";

void test_s3_list_parse(void);
void test_s3_list_parse(void)
{
    s3_listing l = {0};
    int truncated = 0;
    char *token = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(s3_list_parse(PAGE1, strlen(PAGE1), &l, &truncated, &token, &err), 0);
    CHECK_EQ(truncated, 1);
    CHECK(token && !strcmp(token, "tok&1"));
    free(token);
    CHECK_EQ(s3_list_parse(PAGE2, strlen(PAGE2), &l, &truncated, &token, &err), 0);
    CHECK_EQ(truncated, 0);
    CHECK(token == NULL);
    s3_listing_sort(&l);
    CHECK_EQ(l.n, 4);
    const s3_object *o = s3_listing_find(&l, "p/s.zarr/zarr.json");
    CHECK(o && o->size == 120 && !strcmp(o->etag, "\"abc\"") && o->mtime == 1767323045);
    o = s3_listing_find(&l, "p/s.zarr/X/c/0/0");
    CHECK(o && o->size == 4194304 && !strcmp(o->etag, "\"def\"") && o->mtime == 1767323046);
    CHECK(s3_listing_find(&l, "p/a <b> & c.h5ad") != NULL);
    CHECK(s3_listing_find(&l, "p/s.zarr") == NULL);
    size_t i = s3_listing_lower_bound(&l, "p/s.zarr/X/");
    CHECK(i < l.n && !strcmp(l.objs[i].key, "p/s.zarr/X/c/0/0"));
    s3_listing_free(&l);
}

void test_s3_list_refuses(void);
void test_s3_list_refuses(void)
{
    static const char *const bad[] = {
        "<Error><Code>AccessDenied</Code></Error>",                                  /* no listing */
        "<ListBucketResult><Contents><Key>k</Key><Size>12",                         /* cut short */
        "<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>",   /* no size */
        "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>k</Key><Size>99999999999999999999999</Size></Contents>",
        "<ListBucketResult><Contents><Key></Key><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>a&bogus;b</Key><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>a&#0;b</Key><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>a\x01</Key><Size>1</Size></Contents></ListBucketResult>",
        /* a control character by reference (found by s3_list_fuzz) */
        "<ListBucketResult><Contents><Key>k&#x19;</Key><Size>3</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>k&#10;</Key><Size>3</Size></Contents></ListBucketResult>",
        "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",    /* no token */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        s3_listing l = {0};
        int truncated = 0;
        char *token = NULL;
        cellar_error err;
        cellar_error_clear(&err);
        int rc = s3_list_parse(bad[i], strlen(bad[i]), &l, &truncated, &token, &err);
        if (rc != CELLAR_EFORMAT)
            fprintf(stderr, "bad listing %zu: rc %d\n", i, rc);
        CHECK_EQ(rc, CELLAR_EFORMAT);
        CHECK(err.detail[0]);
        free(token);
        s3_listing_free(&l);
    }
    /* A key over S3's 1024 bytes. */
    size_t n = 3000;
    char *big = malloc(n + 200);
    int w = snprintf(big, 64, "<ListBucketResult><Contents><Key>");
    memset(big + w, 'k', 2000);
    strcpy(big + w + 2000, "</Key><Size>1</Size></Contents></ListBucketResult>");
    s3_listing l = {0};
    int truncated = 0;
    char *token = NULL;
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(s3_list_parse(big, strlen(big), &l, &truncated, &token, &err), CELLAR_EFORMAT);
    s3_listing_free(&l);
    free(big);
}

void test_s3_encode(void);
void test_s3_encode(void)
{
    char out[64] = "x/";
    CHECK_EQ(s3_encode("a b/c~d_e.f-g+h%", 1, out, sizeof out), 0);
    CHECK_STR_EQ(out, "x/a%20b/c~d_e.f-g%2Bh%25");
    char q[64] = "";
    CHECK_EQ(s3_encode("p/q", 0, q, sizeof q), 0);
    CHECK_STR_EQ(q, "p%2Fq");
    char small[4] = "";
    CHECK_EQ(s3_encode("abcd", 1, small, sizeof small), -1);
}

void test_remote_cache(void);
void test_remote_cache(void)
{
    remote_cache *c = remote_cache_new(4000);
    char a[1000], b[1000], out[1000];
    memset(a, 'a', sizeof a);
    memset(b, 'b', sizeof b);
    remote_cache_put(c, "u\n\"e1\"", 0, a, sizeof a);
    CHECK_EQ(remote_cache_get(c, "u\n\"e1\"", 0, sizeof a, out), 1);
    CHECK(!memcmp(out, a, sizeof a));
    /* Another ETag of the same URL is another object. */
    CHECK_EQ(remote_cache_get(c, "u\n\"e2\"", 0, sizeof a, out), 0);
    /* A range inside a kept one. */
    CHECK_EQ(remote_cache_get_within(c, "u\n\"e1\"", 0, sizeof a, 10, 20, out), 1);
    CHECK_EQ(remote_cache_get_within(c, "u\n\"e1\"", 0, sizeof a, 990, 20, out), 0);
    CHECK_EQ(remote_cache_contains(c, "u\n\"e1\"", 0, sizeof a), 1);
    /* Over a quarter of the limit: not kept. */
    char big[1100] = {0};
    remote_cache_put(c, "big", 0, big, sizeof big);
    CHECK_EQ(remote_cache_contains(c, "big", 0, sizeof big), 0);
    /* Past the limit the least recently used go. */
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "k%d", i);
        remote_cache_put(c, id, 0, b, sizeof b);
    }
    remote_cache_stats st;
    remote_cache_get_stats(c, &st);
    CHECK(st.bytes <= 4000 && st.entries == 4);
    CHECK_EQ(remote_cache_contains(c, "u\n\"e1\"", 0, sizeof a), 0);
    CHECK_EQ(remote_cache_contains(c, "k3", 0, sizeof b), 1);
    remote_cache_free(c);
    remote_cache *off = remote_cache_new(0);
    remote_cache_put(off, "x", 0, a, 10);
    CHECK_EQ(remote_cache_contains(off, "x", 0, 10), 0);
    remote_cache_free(off);
}

void test_remote_credentials_file(void);
void test_remote_credentials_file(void)
{
    char path[] = "/tmp/cellar-creds-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    const char text[] = "# comment\n[other]\naws_access_key_id = NO\n\n[default]\n"
                        "aws_access_key_id = AKID \naws_secret_access_key=SECRET\n"
                        "aws_session_token = TOKEN\n[profile p2]\naws_access_key_id = P2\n";
    CHECK(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
    close(fd);
    char k[64], s[64], t[64];
    cellar_error err;
    cellar_error_clear(&err);
    CHECK_EQ(remote_credentials_read(path, "default", k, s, t, sizeof k, &err), 0);
    CHECK_STR_EQ(k, "AKID");
    CHECK_STR_EQ(s, "SECRET");
    CHECK_STR_EQ(t, "TOKEN");
    CHECK_EQ(remote_credentials_read(path, "p2", k, s, t, sizeof k, &err), 0);
    CHECK_STR_EQ(k, "P2");
    CHECK_STR_EQ(s, "");
    CHECK_EQ(remote_credentials_read(path, "none", k, s, t, sizeof k, &err), 0);
    CHECK_STR_EQ(k, "");
    unlink(path);
    cellar_error_clear(&err);
    CHECK_EQ(remote_credentials_read(path, "default", k, s, t, sizeof k, &err),
             CELLAR_ENOTFOUND);
}

void test_remote_roots_config(void);
void test_remote_roots_config(void)
{
    remote_roots_config cfg = {.s3_endpoint = "http://127.0.0.1:9", .path_style = -1};
    cellar_error err;
    cellar_error_clear(&err);
    remote_roots *r = remote_roots_new(&cfg, &err);
    CHECK(r != NULL);
    CHECK_EQ(remote_roots_add_s3(r, "s3://bucket/some/prefix/", &err), 0);
    CHECK_EQ(remote_roots_add_mount(r, "web/a.zarr=http://h/x/a.zarr", &err), 0);
    CHECK_EQ(remote_roots_add_mount(r, "s.h5ad=s3://bucket/k/s.h5ad", &err), 0);
    CHECK(remote_roots_is_mount(r, "web/a.zarr") && !remote_roots_is_mount(r, "a.zarr"));
    static const char *const bad_roots[] = {"s3://", "s3://B/x", "s3://b/../x", "http://b/x",
                                            "s3://bb", "s3://b/x//y"};
    for (size_t i = 0; i < sizeof bad_roots / sizeof *bad_roots; i++) {
        cellar_error_clear(&err);
        CHECK_EQ(remote_roots_add_s3(r, bad_roots[i], &err), CELLAR_EINVAL);
    }
    static const char *const bad_mounts[] = {"noequals", "=http://h/a", "../a.zarr=http://h/a",
                                             "a.zarr=ftp://h/a", "a.zarr=http://h/a?x=1",
                                             "a.zarr=http://host", "a.zarr=s3://bucket"};
    for (size_t i = 0; i < sizeof bad_mounts / sizeof *bad_mounts; i++) {
        cellar_error_clear(&err);
        CHECK_EQ(remote_roots_add_mount(r, bad_mounts[i], &err), CELLAR_EINVAL);
    }
    remote_roots_free(r);
    remote_roots_config bad = {.s3_endpoint = "ftp://x", .path_style = -1};
    cellar_error_clear(&err);
    CHECK(remote_roots_new(&bad, &err) == NULL && err.code == CELLAR_EINVAL);
}

void test_remote_cache_spill(void);
void test_remote_cache_spill(void)
{
    char dir[] = "/tmp/cellar-spill-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    remote_cache *c = remote_cache_new(4000);
    CHECK_EQ(remote_cache_spill_to(c, dir, 5000), 0);
    char block[1000], out[1000];
    for (int i = 0; i < 9; i++) {
        char id[16];
        snprintf(id, sizeof id, "k%d", i);
        memset(block, 'a' + i, sizeof block);
        remote_cache_put(c, id, 0, block, sizeof block);
    }
    remote_cache_stats st;
    remote_cache_get_stats(c, &st);
    CHECK(st.bytes <= 4000 && st.disk_bytes <= 5000 && st.disk_entries == 5);
    /* k0..k4 were spilled (k5..k8 in memory), and read back from disk. */
    CHECK_EQ(remote_cache_get(c, "k0", 0, sizeof out, out), 1);
    CHECK(out[0] == 'a' && out[999] == 'a');
    CHECK_EQ(remote_cache_get_within(c, "k2", 0, sizeof out, 100, 50, out), 1);
    CHECK(out[0] == 'c' && out[49] == 'c');
    remote_cache_get_stats(c, &st);
    CHECK_EQ(st.disk_hits, 2);
    /* One more spill passes the disk bound: the least recently used file
     * goes (k1; k0 and k2 were read since). */
    memset(block, 'z', sizeof block);
    remote_cache_put(c, "k9", 0, block, sizeof block);
    CHECK_EQ(remote_cache_get(c, "k1", 0, sizeof out, out), 0);
    CHECK_EQ(remote_cache_get(c, "k0", 0, sizeof out, out), 1);
    /* A spilled file that changed size is not trusted (and is forgotten). */
    char path[4200];
    snprintf(path, sizeof path, "%s/remote-%ld", dir, (long)getpid());
    int seen = 0;
    for (uint64_t n = 1; n <= 10; n++) {
        char f[4400];
        snprintf(f, sizeof f, "%s/%016llx.bin", path, (unsigned long long)n);
        if (access(f, F_OK) == 0) {
            seen++;
            if (truncate(f, 10) != 0)
                seen = -100;
        }
    }
    CHECK_EQ(seen, 5);
    CHECK_EQ(remote_cache_get(c, "k3", 0, sizeof out, out), 0);
    remote_cache_get_stats(c, &st);
    CHECK_EQ(st.disk_entries, 4);
    remote_cache_free(c);
    CHECK(access(path, F_OK) != 0); /* the process's directory is gone */
    rmdir(dir);
}

/* The URL of s3://my-bucket/KEY for an endpoint and an addressing style. */
static void s3_object_url(const char *endpoint, int path_style, const char *region,
                          const char *key, char *out, size_t size)
{
    remote_roots_config cfg = {.s3_endpoint = endpoint, .path_style = path_style,
                               .client = {.region = region}};
    cellar_error err;
    cellar_error_clear(&err);
    remote_roots *r = remote_roots_new(&cfg, &err);
    remote_loc l;
    out[0] = '\0';
    CHECK(r != NULL);
    if (r && remote_loc_s3(r, "my-bucket", key, &l) == 0)
        snprintf(out, size, "%s", l.url);
    remote_roots_free(r);
}

void test_remote_s3_urls(void);
void test_remote_s3_urls(void)
{
    char url[2048];
    /* Path style off: the bucket is a host name below the endpoint's
     * (its port kept), the key percent-encoded but for its slashes. */
    s3_object_url("https://s3.example.org:9000/", 0, NULL, "lab/Zellatlas f\xc3\xbcr 3k.zarr/X/0.0",
                  url, sizeof url);
    CHECK_STR_EQ(url, "https://my-bucket.s3.example.org:9000/lab/Zellatlas%20f%C3%BCr%203k.zarr/X/0.0");
    s3_object_url("http://minio.internal", 0, NULL, "a.h5ad", url, sizeof url);
    CHECK_STR_EQ(url, "http://my-bucket.minio.internal/a.h5ad");
    /* No endpoint: AWS's of the region, virtual hosts by default. */
    s3_object_url(NULL, -1, "eu-central-1", "a/b.zarr", url, sizeof url);
    CHECK_STR_EQ(url, "https://my-bucket.s3.eu-central-1.amazonaws.com/a/b.zarr");
    s3_object_url(NULL, -1, NULL, "", url, sizeof url);
    CHECK_STR_EQ(url, "https://my-bucket.s3.us-east-1.amazonaws.com/");
    /* Path style: on with an endpoint unless asked otherwise, or by hand. */
    s3_object_url("http://127.0.0.1:8333", -1, NULL, "a b", url, sizeof url);
    CHECK_STR_EQ(url, "http://127.0.0.1:8333/my-bucket/a%20b");
    s3_object_url(NULL, 1, "eu-central-1", "k", url, sizeof url);
    CHECK_STR_EQ(url, "https://s3.eu-central-1.amazonaws.com/my-bucket/k");
}
