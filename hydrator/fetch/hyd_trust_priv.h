/*
 * hydrator/fetch/hyd_trust_priv.h — signed generations on the
 * destination (--trust-key, struct hyd_creds): checking a generation's
 * signed statement before its catalog is installed, and what the cache
 * keeps of them. Not a face: for the catalog download and the manifest
 * fetcher of this room.
 *
 * The cache keeps, in CACHEDIR/catalogs/ (per URL: they go with the
 * catalogs when the cache is used for another URL):
 *   GEN.sig  the statement that let catalogs/GEN.db in, as served;
 *   seen     the highest generation whose statement verified, decimal
 *            and "\n": a generation below it is a rollback and refused,
 *            whatever signs it (temp + rename, fsynced).
 * Blocking file I/O; any thread.
 */
#ifndef FERRY_HYD_TRUST_PRIV_H
#define FERRY_HYD_TRUST_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "hydrator/hydrator.h"

/* 1 when c asks for signed generations (--trust-key). */
int hyd_trust_on(const struct hyd_creds *c);

/* The namespace of a base URL ".../v1/NAME[/]" into ns (cap bytes).
 * 0 or -EINVAL. */
int hyd_trust_url_ns(const char *base_url, char *ns, size_t cap);

/* The highest generation seen (catalogs/seen) into *ret; 0 when none.
 * 0 or -errno (-EBADMSG: not a generation). */
int hyd_trust_seen(const char *cat_dir, uint64_t *ret);

/* catalogs/seen := gen, unless it holds a higher one already. */
int hyd_trust_seen_raise(const char *cat_dir, uint64_t gen);

/* Check buf[0..len), the statement served for generation gen of
 * namespace ns, with c's key: it verifies, names ns and gen, and gen is
 * not below seen. 0 with *ret filled, or -EKEYREJECTED with one human
 * line in why (no newline) saying what is wrong: not a statement, another
 * key (its id), changed bytes, another namespace or generation, a
 * rollback. */
int hyd_trust_check(const struct hyd_creds *c, const char *ns, uint64_t gen,
		    uint64_t seen, const void *buf, size_t len,
		    struct cat_stmt *ret, char *why, size_t whycap);

/* Keep a checked statement as catalogs/GEN.sig (temp + rename). */
int hyd_trust_keep(const char *cat_dir, uint64_t gen, const void *buf,
		   size_t len);

/* The kept statement of generation gen, checked again with c's key and
 * for (ns, gen): 0 with *ret, -ENOENT (none kept), -EKEYREJECTED (it does
 * not check out), -errno. */
int hyd_trust_kept(const struct hyd_creds *c, const char *cat_dir,
		   const char *ns, uint64_t gen, struct cat_stmt *ret);

/* Remove the kept statements catalogs/GEN.sig with no catalogs/GEN.db
 * beside them (their generation left the cache); all of them and
 * catalogs/seen when all is set (the cache goes to another URL). */
void hyd_trust_forget(const char *cat_dir, int all);

#endif
