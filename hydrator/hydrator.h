/*
 * hydrator/hydrator.h — the destination side of ferry, as a library.
 *
 * This is the one public header of hydrator/: what tools/ (the `ferry`
 * command) may call. The mount itself is the ferry-hydrator program
 * (hydrator/hyd_main.c); what is here lets a tool name the same things the
 * program does — the namespace a URL points at and the cache directory a
 * mount of that URL uses — so `ferry status URL` finds a running mount.
 *
 * Conventions as in catalog.h: 0 on success, -errno on failure. Every
 * function here is pure computation, safe from any thread.
 */
#ifndef FERRY_HYDRATOR_H
#define FERRY_HYDRATOR_H

#include <stddef.h>

#define HYD_VERSION "0.1.0"
#ifndef FERRY_VERSION
#define FERRY_VERSION HYD_VERSION
#endif

#define HYD_NS_NAME_MAX 64u /* bytes in a namespace name */
#define HYD_URL_MAX 2048u   /* bytes in a base URL */

/* Check a hydrator URL, "http[s]://HOST[:PORT]/v1/NAME" (one trailing '/'
 * allowed), with curl's URL parser: scheme http or https, a host, no
 * user:password, query or fragment, path exactly /v1/NAME with NAME a
 * namespace name ([A-Za-z0-9._-]{1,64}, not starting with '.').
 * On success writes the normalized base URL (curl's spelling, no trailing
 * '/') into ret_base and NAME into ret_name.
 * On failure writes one human line (no newline) into errbuf and returns
 * -EINVAL (bad URL), -ENAMETOOLONG (a buffer is too small) or -ENOMEM. */
int hyd_url_parse(const char *url, char *ret_base, size_t base_cap,
		  char *ret_name, size_t name_cap, char *errbuf,
		  size_t errcap);

/* The default cache directory of a mount of base_url (as returned by
 * hyd_url_parse) of namespace name:
 *   as root:    /var/cache/ferry/NAME-H
 *   otherwise:  $XDG_CACHE_HOME/ferry/NAME-H, else $HOME/.cache/ferry/NAME-H
 * where H is the first 12 hex digits of SHA-256(base_url). Only computes
 * the path; creates nothing. Returns 0, -ENOENT (neither XDG_CACHE_HOME nor
 * HOME is set, non-root), -ENAMETOOLONG, -EIO. */
int hyd_cache_dir_default(const char *base_url, const char *name, char *buf,
			  size_t cap);

#endif
