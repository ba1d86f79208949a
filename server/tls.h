/* HTTPS (--tls-cert, --tls-key) through libmicrohttpd's GnuTLS support.
 *
 * libmicrohttpd 0.9.75 loads MHD_OPTION_HTTPS_MEM_CERT/KEY once, into a
 * daemon's credentials, and has no call to change them on a running
 * daemon.  What it does offer is MHD_OPTION_HTTPS_CERT_CALLBACK (GnuTLS's
 * certificate retrieve function), asked during every handshake.  So the
 * certificate chain and key live here as a reference-counted identity:
 * each connection takes a reference on the current identity when it opens
 * (MHD_OPTION_NOTIFY_CONNECTION) and hands it to GnuTLS in its handshake;
 * a reload (SIGHUP) loads the files again and, only when they load and the
 * key matches the certificate, makes the new identity current.  New
 * connections then get the new certificate; open ones keep theirs, and an
 * identity is freed when its last connection closes. */
#ifndef CELLAR_TLS_H
#define CELLAR_TLS_H

#include <microhttpd.h>
#include <stddef.h>

#include "common/error.h"

typedef struct tls_server tls_server;

/* Loads the PEM certificate chain at cert_path (the server's certificate
 * first) and its unencrypted PEM private key at key_path.  NULL with err
 * (CELLAR_EINVAL) naming the file and what is wrong: unreadable, not PEM,
 * no certificate, a key that is not the certificate's, or a libmicrohttpd
 * built without TLS.  An expired certificate loads (a warning is logged):
 * clients refuse it themselves.  The paths are copied. */
tls_server *tls_open(const char *cert_path, const char *key_path, cellar_error *err);

/* Loads the files again: 0 when the new certificate is now served, else
 * the one in use stays and err says why. */
int tls_reload(tls_server *t, cellar_error *err);

/* One line on the current certificate (subject, serial, expiry) for logs. */
void tls_describe(tls_server *t, char *out, size_t size);

/* The daemon options that serve t's identity (the certificate callback and
 * the connection notifications), ending with MHD_OPTION_END, for
 * MHD_OPTION_ARRAY.  The daemon also needs MHD_USE_TLS. */
#define TLS_DAEMON_OPTIONS 3
void tls_daemon_options(tls_server *t, struct MHD_OptionItem out[TLS_DAEMON_OPTIONS]);

/* Frees t; call after every daemon using it has stopped (its connections
 * have then dropped their references).  NULL is fine. */
void tls_free(tls_server *t);

#endif
