#include "server/tls.h"

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Longest certificate chain taken from --tls-cert. */
#define MAX_CHAIN 16

/* A certificate chain and its key, as GnuTLS hands them to a handshake. */
typedef struct tls_identity {
    atomic_size_t refs;
    gnutls_pcert_st certs[MAX_CHAIN];
    unsigned n_certs;
    gnutls_privkey_t key;
    char summary[320];
} tls_identity;

struct tls_server {
    pthread_mutex_t lock; /* guards current (the swap and the reference taken) */
    tls_identity *current;
    char *cert_path, *key_path;
};

static void identity_free(tls_identity *id)
{
    for (unsigned i = 0; i < id->n_certs; i++)
        gnutls_pcert_deinit(&id->certs[i]);
    if (id->key)
        gnutls_privkey_deinit(id->key);
    free(id);
}

static void identity_release(tls_identity *id)
{
    if (id && atomic_fetch_sub(&id->refs, 1) == 1)
        identity_free(id);
}

static tls_identity *identity_acquire(tls_server *t)
{
    pthread_mutex_lock(&t->lock);
    tls_identity *id = t->current;
    atomic_fetch_add(&id->refs, 1);
    pthread_mutex_unlock(&t->lock);
    return id;
}

/* Whether the key is the one the first certificate's public key belongs to. */
static int key_matches(tls_identity *id)
{
    gnutls_pubkey_t from_key = NULL;
    gnutls_datum_t a = {NULL, 0}, b = {NULL, 0};
    int same = gnutls_pubkey_init(&from_key) == 0 &&
               gnutls_pubkey_import_privkey(from_key, id->key, 0, 0) == 0 &&
               gnutls_pubkey_export2(from_key, GNUTLS_X509_FMT_DER, &a) == 0 &&
               gnutls_pubkey_export2(id->certs[0].pubkey, GNUTLS_X509_FMT_DER, &b) == 0 &&
               a.size == b.size && memcmp(a.data, b.data, a.size) == 0;
    gnutls_free(a.data);
    gnutls_free(b.data);
    if (from_key)
        gnutls_pubkey_deinit(from_key);
    return same;
}

static void utc_text(time_t t, char *out, size_t size)
{
    struct tm tm;
    if (t == (time_t)-1 || !gmtime_r(&t, &tm) || !strftime(out, size, "%Y-%m-%d %H:%M:%S UTC", &tm))
        snprintf(out, size, "?");
}

/* The summary line of the first certificate; 1 when it is not valid now. */
static int summarize(tls_identity *id, const char *path)
{
    gnutls_x509_crt_t crt = NULL;
    gnutls_datum_t dn = {NULL, 0};
    unsigned char serial[64];
    size_t serial_len = sizeof serial;
    int parsed = gnutls_x509_crt_init(&crt) == 0 &&
                 gnutls_x509_crt_import(crt, &id->certs[0].cert, GNUTLS_X509_FMT_DER) == 0;
    if (!parsed || gnutls_x509_crt_get_serial(crt, serial, &serial_len) != 0)
        serial_len = 0;
    char serial_hex[2 * sizeof serial + 1] = "";
    for (size_t i = 0; i < serial_len; i++)
        snprintf(serial_hex + 2 * i, 3, "%02x", serial[i]);
    time_t from = parsed ? gnutls_x509_crt_get_activation_time(crt) : (time_t)-1;
    time_t until = parsed ? gnutls_x509_crt_get_expiration_time(crt) : (time_t)-1;
    char until_text[64];
    utc_text(until, until_text, sizeof until_text);
    if (!parsed || gnutls_x509_crt_get_dn3(crt, &dn, 0) != 0)
        dn.data = NULL;
    snprintf(id->summary, sizeof id->summary, "%s: %.120s, serial %s, valid until %s", path,
             dn.data ? (const char *)dn.data : "?", serial_len ? serial_hex : "?", until_text);
    gnutls_free(dn.data);
    if (crt)
        gnutls_x509_crt_deinit(crt);
    time_t now = time(NULL);
    return (from != (time_t)-1 && now < from) || (until != (time_t)-1 && now > until);
}

static int load_failed(cellar_error *err, const char *flag, const char *path, int rc)
{
    return cellar_fail(err, CELLAR_EINVAL, "%s %s: %s", flag, path, gnutls_strerror(rc));
}

/* The identity in the two files, holding one reference; NULL with err. */
static tls_identity *identity_load(const char *cert_path, const char *key_path,
                                   cellar_error *err)
{
    gnutls_datum_t cert = {NULL, 0}, key = {NULL, 0};
    tls_identity *id = calloc(1, sizeof *id);
    if (!id) {
        cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        return NULL;
    }
    atomic_init(&id->refs, 1);
    int rc = gnutls_load_file(cert_path, &cert);
    if (rc < 0) {
        load_failed(err, "--tls-cert", cert_path, rc);
        goto fail;
    }
    unsigned n = MAX_CHAIN;
    rc = gnutls_pcert_list_import_x509_raw(id->certs, &n, &cert, GNUTLS_X509_FMT_PEM,
                                           GNUTLS_X509_CRT_LIST_FAIL_IF_UNSORTED);
    if (rc < 0 || n == 0) {
        load_failed(err, "--tls-cert", cert_path, rc < 0 ? rc : GNUTLS_E_NO_CERTIFICATE_FOUND);
        goto fail;
    }
    id->n_certs = n;
    rc = gnutls_load_file(key_path, &key);
    if (rc < 0) {
        load_failed(err, "--tls-key", key_path, rc);
        goto fail;
    }
    rc = gnutls_privkey_init(&id->key);
    if (rc == 0)
        rc = gnutls_privkey_import_x509_raw(id->key, &key, GNUTLS_X509_FMT_PEM, NULL, 0);
    if (rc < 0) {
        load_failed(err, "--tls-key", key_path, rc);
        goto fail;
    }
    if (!key_matches(id)) {
        cellar_fail(err, CELLAR_EINVAL, "--tls-key %s is not the key of --tls-cert %s", key_path,
                    cert_path);
        goto fail;
    }
    if (summarize(id, cert_path))
        fprintf(stderr, "cellar: warning: the TLS certificate is not valid now (%s); clients "
                        "will refuse it\n", id->summary);
    goto done;
fail:
    identity_free(id);
    id = NULL;
done:
    gnutls_free(cert.data);
    if (key.data)
        gnutls_memset(key.data, 0, key.size);
    gnutls_free(key.data);
    return id;
}

tls_server *tls_open(const char *cert_path, const char *key_path, cellar_error *err)
{
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES ||
        MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK) != MHD_YES) {
        cellar_fail(err, CELLAR_EINVAL,
                    "this libmicrohttpd is built without TLS (or its certificate callback): "
                    "--tls-cert cannot be served");
        return NULL;
    }
    tls_server *t = calloc(1, sizeof *t);
    if (!t || !(t->cert_path = strdup(cert_path)) || !(t->key_path = strdup(key_path))) {
        if (t)
            free(t->cert_path);
        free(t);
        cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        return NULL;
    }
    t->current = identity_load(cert_path, key_path, err);
    if (!t->current) {
        free(t->cert_path);
        free(t->key_path);
        free(t);
        return NULL;
    }
    pthread_mutex_init(&t->lock, NULL);
    return t;
}

int tls_reload(tls_server *t, cellar_error *err)
{
    tls_identity *fresh = identity_load(t->cert_path, t->key_path, err);
    if (!fresh)
        return err && err->code ? err->code : CELLAR_EINVAL;
    pthread_mutex_lock(&t->lock);
    tls_identity *old = t->current;
    t->current = fresh;
    pthread_mutex_unlock(&t->lock);
    identity_release(old);
    return 0;
}

void tls_describe(tls_server *t, char *out, size_t size)
{
    tls_identity *id = identity_acquire(t);
    snprintf(out, size, "%s", id->summary);
    identity_release(id);
}

/* gnutls_certificate_retrieve_function2, asked in a handshake.
 * libmicrohttpd sets the session's pointer to its connection (and uses it
 * so itself), whose socket context holds the identity the connection took
 * when it opened. */
static int pick_certificate(gnutls_session_t session, const gnutls_datum_t *req_ca_rdn,
                            int nreqs, const gnutls_pk_algorithm_t *pk_algos,
                            int pk_algos_length, gnutls_pcert_st **pcert,
                            unsigned int *pcert_length, gnutls_privkey_t *pkey)
{
    (void)req_ca_rdn, (void)nreqs, (void)pk_algos, (void)pk_algos_length;
    struct MHD_Connection *conn = gnutls_session_get_ptr(session);
    const union MHD_ConnectionInfo *info =
        conn ? MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT) : NULL;
    tls_identity *id = info ? info->socket_context : NULL;
    if (!id)
        return -1;
    *pcert = id->certs;
    *pcert_length = id->n_certs;
    *pkey = id->key;
    return 0;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    (void)conn;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        *socket_context = identity_acquire(cls);
    } else {
        identity_release(*socket_context);
        *socket_context = NULL;
    }
}

void tls_daemon_options(tls_server *t, struct MHD_OptionItem out[TLS_DAEMON_OPTIONS])
{
    out[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK, 0, (void *)pick_certificate};
    out[1] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, t};
    out[2] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}

void tls_free(tls_server *t)
{
    if (!t)
        return;
    identity_release(t->current);
    pthread_mutex_destroy(&t->lock);
    free(t->cert_path);
    free(t->key_path);
    free(t);
}
