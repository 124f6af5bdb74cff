/*
 * catalog/cat_sign.c — signed generations: Ed25519 key pairs (OpenSSL
 * EVP), the signed statement a replicator publishes with each generation
 * (its strict text format, its signature) and the signature of a
 * manifests answer. The formats are in catalog.h and docs/formats.md.
 *
 * Keys are held raw (32 bytes each) and an EVP_PKEY is made for each
 * signature or check: nothing of OpenSSL is shared between threads, and
 * an Ed25519 key costs a few microseconds to set up. Every OpenSSL failure
 * clears the thread's error queue, which curl reads for its own TLS
 * errors on the same thread.
 *
 * Cleanup style in this file: goto out.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"

#define PEM_FILE_MAX 16384u /* bytes of a key file we read */
#define U64_DIGITS 20u

_Static_assert(CAT_SIGN_NS_MAX == BASE_NS_NAME_MAX,
	       "a statement's namespace is a namespace name");

/* The statement's lines after the first, in order. */
enum stmt_line {
	L_NS = 0,
	L_GEN,
	L_PARENT,
	L_DIGEST,
	L_TIME,
	L_KEY,
	L_SIG,
	L_COUNT
};
static const char *const LINE_NAME[L_COUNT] = {
    "namespace", "generation", "parent",    "catalog-digest",
    "time",	 "key",	       "signature",
};

static int ossl_fail(int r)
{
	ERR_clear_error();
	return r;
}

static int is_lower_hex(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= '0' && s[i] <= '9') ||
		      (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

static void to_hex(const uint8_t *b, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = '\0';
}

static void from_hex(const char *s, size_t n, uint8_t *out)
{
	for (size_t i = 0; i < n; i++) {
		unsigned hi = (unsigned)(s[2 * i] <= '9' ? s[2 * i] - '0'
							 : s[2 * i] - 'a' + 10);
		unsigned lo =
		    (unsigned)(s[2 * i + 1] <= '9' ? s[2 * i + 1] - '0'
						   : s[2 * i + 1] - 'a' + 10);

		out[i] = (uint8_t)(hi << 4 | lo);
	}
}

/* A canonical decimal (no sign, no leading zero, fits 64 bits) of
 * s[0..len) into *ret. 0 or -EBADMSG. */
static int parse_dec(const char *s, size_t len, uint64_t *ret)
{
	uint64_t v = 0;

	if (len < 1 || len > U64_DIGITS || (len > 1 && s[0] == '0'))
		return -EBADMSG;
	for (size_t i = 0; i < len; i++) {
		unsigned d;

		if (s[i] < '0' || s[i] > '9')
			return -EBADMSG;
		d = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -EBADMSG;
		v = v * 10 + d;
	}
	*ret = v;
	return 0;
}

/* What a statement's fields must be, whichever way they came. */
static int stmt_fields_ok(const struct cat_stmt *s)
{
	size_t nl = strnlen(s->ns, sizeof(s->ns));

	return nl < sizeof(s->ns) && base_ns_name_check(s->ns, nl) == 0 &&
	       s->generation >= 1 && s->parent < s->generation &&
	       s->time <= (uint64_t)INT64_MAX && strlen(s->digest) == 64 &&
	       is_lower_hex(s->digest, 64) && strlen(s->key_id) == 64 &&
	       is_lower_hex(s->key_id, 64);
}

/* ---- Ed25519 ---- */

static int ed_sign(const uint8_t priv[32], const void *msg, size_t len,
		   uint8_t sig[CAT_SIGN_SIG_LEN])
{
	EVP_PKEY *k =
	    EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, priv, 32);
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	size_t sl = CAT_SIGN_SIG_LEN;
	int r = -EIO;

	if (k && c && EVP_DigestSignInit(c, NULL, NULL, NULL, k) == 1 &&
	    EVP_DigestSign(c, sig, &sl, msg, len) == 1 &&
	    sl == CAT_SIGN_SIG_LEN)
		r = 0;
	EVP_MD_CTX_free(c);
	EVP_PKEY_free(k);
	return r < 0 ? ossl_fail(r) : 0;
}

/* 0 when sig is pub's signature of msg, -EKEYREJECTED when not. */
static int ed_verify(const uint8_t pub[CAT_SIGN_PUB_LEN], const void *msg,
		     size_t len, const uint8_t sig[CAT_SIGN_SIG_LEN])
{
	EVP_PKEY *k = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub,
						  CAT_SIGN_PUB_LEN);
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	int r = -EIO;

	if (k && c && EVP_DigestVerifyInit(c, NULL, NULL, NULL, k) == 1)
		r = EVP_DigestVerify(c, sig, CAT_SIGN_SIG_LEN, msg, len) == 1
			? 0
			: -EKEYREJECTED;
	EVP_MD_CTX_free(c);
	EVP_PKEY_free(k);
	return r < 0 ? ossl_fail(r) : 0;
}

/* ---- keys ---- */

void cat_sign_key_wipe(struct cat_sign_key *k)
{
	if (k)
		OPENSSL_cleanse(k, sizeof(*k));
}

int cat_sign_key_id(const uint8_t pub[CAT_SIGN_PUB_LEN], char ret_hex[65])
{
	chunk_id sum;
	int r = chunk_id_compute(pub, CAT_SIGN_PUB_LEN, &sum);

	if (r < 0)
		return r;
	chunk_id_to_hex(&sum, ret_hex);
	return 0;
}

/* Never ask for a pass phrase (PEM's default reads the terminal). */
static int no_pass(char *buf, int size, int rwflag, void *u)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)u;
	return -1;
}

/* The PEM text of path, in a BIO; NULL with *ret_err set. The buffer
 * holds a private key: it is wiped by the caller (pem_done). */
static BIO *pem_open(const char *path, char *buf, size_t cap, int *ret_err)
{
	size_t len = 0;
	BIO *b;
	int r;

	r = base_file_read_small(path, buf, cap, &len);
	if (r == -EFBIG) {
		*ret_err = -EBADMSG; /* larger than any key file */
		return NULL;
	}
	if (r < 0) {
		*ret_err = r;
		return NULL;
	}
	b = BIO_new_mem_buf(buf, (int)len);
	if (!b)
		*ret_err = ossl_fail(-ENOMEM);
	return b;
}

static void pem_done(BIO *b, char *buf, size_t cap)
{
	BIO_free(b);
	OPENSSL_cleanse(buf, cap);
}

int cat_sign_key_load(const char *path, struct cat_sign_key *ret)
{
	char *buf = malloc(PEM_FILE_MAX);
	EVP_PKEY *k = NULL;
	size_t pl = sizeof(ret->priv), ul = sizeof(ret->pub);
	BIO *b = NULL;
	int r = 0;

	memset(ret, 0, sizeof(*ret));
	if (!buf)
		return -ENOMEM;
	b = pem_open(path, buf, PEM_FILE_MAX, &r);
	if (!b)
		goto out;
	k = PEM_read_bio_PrivateKey(b, NULL, no_pass, NULL);
	if (!k || EVP_PKEY_get_base_id(k) != EVP_PKEY_ED25519 ||
	    EVP_PKEY_get_raw_private_key(k, ret->priv, &pl) != 1 ||
	    pl != sizeof(ret->priv) ||
	    EVP_PKEY_get_raw_public_key(k, ret->pub, &ul) != 1 ||
	    ul != sizeof(ret->pub)) {
		r = ossl_fail(-EBADMSG);
		cat_sign_key_wipe(ret);
	}
out:
	EVP_PKEY_free(k);
	pem_done(b, buf, PEM_FILE_MAX);
	free(buf);
	return r;
}

int cat_sign_pub_load(const char *path, uint8_t ret[CAT_SIGN_PUB_LEN])
{
	char *buf = malloc(PEM_FILE_MAX);
	EVP_PKEY *k = NULL;
	size_t ul = CAT_SIGN_PUB_LEN;
	BIO *b = NULL;
	int r = 0;

	if (!buf)
		return -ENOMEM;
	b = pem_open(path, buf, PEM_FILE_MAX, &r);
	if (!b)
		goto out;
	k = PEM_read_bio_PUBKEY(b, NULL, no_pass, NULL);
	if (!k || EVP_PKEY_get_base_id(k) != EVP_PKEY_ED25519 ||
	    EVP_PKEY_get_raw_public_key(k, ret, &ul) != 1 ||
	    ul != CAT_SIGN_PUB_LEN)
		r = ossl_fail(-EBADMSG);
out:
	EVP_PKEY_free(k);
	pem_done(b, buf, PEM_FILE_MAX);
	free(buf);
	return r;
}

/* Does path exist? 1, 0, or -errno. */
static int exists(const char *path)
{
	struct stat st;

	if (lstat(path, &st) == 0)
		return 1;
	return errno == ENOENT ? 0 : -errno;
}

int cat_sign_keygen(const char *dir)
{
	char *kpath = NULL, *ppath = NULL, *kdata = NULL, *pdata = NULL;
	size_t dl = strlen(dir);
	EVP_PKEY *k = NULL;
	BIO *bk = NULL, *bp = NULL;
	long kl, pl;
	int r;

	kpath = malloc(dl + 16);
	ppath = malloc(dl + 16);
	if (!kpath || !ppath) {
		r = -ENOMEM;
		goto out;
	}
	snprintf(kpath, dl + 16, "%s/sign.key", dir);
	snprintf(ppath, dl + 16, "%s/sign.pub", dir);
	r = base_mkdir_p(dir, 0700);
	if (r < 0)
		goto out;
	r = exists(kpath);
	if (r == 0)
		r = exists(ppath);
	if (r != 0) {
		r = r > 0 ? -EEXIST : r;
		goto out;
	}
	k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	/* the private key's PEM in secure memory, wiped when freed */
	bk = BIO_new(BIO_s_secmem());
	bp = BIO_new(BIO_s_mem());
	if (!k || !bk || !bp ||
	    PEM_write_bio_PrivateKey(bk, k, NULL, NULL, 0, NULL, NULL) != 1 ||
	    PEM_write_bio_PUBKEY(bp, k) != 1) {
		r = ossl_fail(-EIO);
		goto out;
	}
	kl = BIO_get_mem_data(bk, &kdata);
	pl = BIO_get_mem_data(bp, &pdata);
	if (kl <= 0 || pl <= 0) {
		r = ossl_fail(-EIO);
		goto out;
	}
	r = base_file_write_new(kpath, kdata, (size_t)kl, 0600);
	if (r == 0) {
		r = base_file_write_new(ppath, pdata, (size_t)pl, 0644);
		if (r < 0)
			unlink(kpath); /* a key without its .pub is no use */
	}
	if (r == 0)
		r = base_fsync_path(dir);
out:
	BIO_free(bk);
	BIO_free(bp);
	EVP_PKEY_free(k);
	free(kpath);
	free(ppath);
	return r;
}

/* ---- statements ---- */

/* The statement's text up to (and without) its signature line. */
static int stmt_body(const struct cat_stmt *s, char *buf, size_t cap,
		     size_t *ret_len)
{
	int n = snprintf(buf, cap,
			 CAT_STMT_MAGIC "\n"
					"namespace %s\n"
					"generation %" PRIu64 "\n"
					"parent %" PRIu64 "\n"
					"catalog-digest %s\n"
					"time %" PRIu64 "\n"
					"key %s\n",
			 s->ns, s->generation, s->parent, s->digest, s->time,
			 s->key_id);

	if (n < 0)
		return -EINVAL;
	if ((size_t)n >= cap)
		return -ENOBUFS;
	*ret_len = (size_t)n;
	return 0;
}

int cat_stmt_format(struct cat_stmt *s, char *buf, size_t cap, size_t *ret_len)
{
	size_t n;
	int r;

	if (!stmt_fields_ok(s))
		return -EINVAL;
	r = stmt_body(s, buf, cap, &n);
	if (r < 0)
		return r;
	/* "signature " + 128 hex + "\n" + NUL */
	if (cap - n < 10 + CAT_SIGN_SIG_HEX_LEN + 2)
		return -ENOBUFS;
	s->signed_len = n;
	memcpy(buf + n, "signature ", 10);
	to_hex(s->sig, CAT_SIGN_SIG_LEN, buf + n + 10);
	n += 10 + CAT_SIGN_SIG_HEX_LEN;
	buf[n++] = '\n';
	buf[n] = '\0';
	*ret_len = n;
	return 0;
}

int cat_stmt_sign(const struct cat_sign_key *k, struct cat_stmt *s, char *buf,
		  size_t cap, size_t *ret_len)
{
	size_t n;
	int r;

	r = cat_sign_key_id(k->pub, s->key_id);
	if (r < 0)
		return r;
	if (!stmt_fields_ok(s))
		return -EINVAL;
	r = stmt_body(s, buf, cap, &n);
	if (r == 0)
		r = ed_sign(k->priv, buf, n, s->sig);
	if (r == 0)
		r = cat_stmt_format(s, buf, cap, ret_len);
	return r;
}

/* One line "NAME VALUE\n" at *p (before end): the value's bounds. */
static int take_line(const char **p, const char *end, const char *name,
		     const char **ret_v, size_t *ret_vl)
{
	size_t nl = strlen(name);
	const char *s = *p, *lf;

	if ((size_t)(end - s) < nl + 2 || memcmp(s, name, nl) != 0 ||
	    s[nl] != ' ')
		return -EBADMSG;
	s += nl + 1;
	lf = memchr(s, '\n', (size_t)(end - s));
	if (!lf || lf == s)
		return -EBADMSG;
	*ret_v = s;
	*ret_vl = (size_t)(lf - s);
	*p = lf + 1;
	return 0;
}

int cat_stmt_parse(const void *buf, size_t len, struct cat_stmt *ret)
{
	const char *p = buf, *end = p + len, *v;
	size_t ml = strlen(CAT_STMT_MAGIC), vl;
	int r = 0;

	memset(ret, 0, sizeof(*ret));
	if (!buf || len > CAT_STMT_MAX || len < ml + 1 ||
	    memcmp(p, CAT_STMT_MAGIC, ml) != 0 || p[ml] != '\n')
		return -EBADMSG;
	p += ml + 1;
	for (int i = 0; r == 0 && i < L_COUNT; i++) {
		if (i == L_SIG)
			ret->signed_len = (size_t)(p - (const char *)buf);
		r = take_line(&p, end, LINE_NAME[i], &v, &vl);
		if (r < 0)
			break;
		switch (i) {
		case L_NS:
			if (vl > CAT_SIGN_NS_MAX ||
			    base_ns_name_check(v, vl) < 0)
				r = -EBADMSG;
			else
				memcpy(ret->ns, v, vl);
			break;
		case L_GEN:
			r = parse_dec(v, vl, &ret->generation);
			break;
		case L_PARENT:
			r = parse_dec(v, vl, &ret->parent);
			break;
		case L_TIME:
			r = parse_dec(v, vl, &ret->time);
			break;
		case L_DIGEST:
		case L_KEY:
			if (vl != 64 || !is_lower_hex(v, vl))
				r = -EBADMSG;
			else
				memcpy(i == L_KEY ? ret->key_id : ret->digest,
				       v, 64);
			break;
		case L_SIG:
			if (vl != CAT_SIGN_SIG_HEX_LEN || !is_lower_hex(v, vl))
				r = -EBADMSG;
			else
				from_hex(v, CAT_SIGN_SIG_LEN, ret->sig);
			break;
		}
	}
	if (r == 0 && (p != end || !stmt_fields_ok(ret)))
		r = -EBADMSG;
	if (r < 0)
		memset(ret, 0, sizeof(*ret));
	return r;
}

int cat_stmt_verify(const void *buf, size_t len,
		    const uint8_t pub[CAT_SIGN_PUB_LEN], struct cat_stmt *ret)
{
	int r = cat_stmt_parse(buf, len, ret);

	if (r < 0)
		return r;
	return ed_verify(pub, buf, ret->signed_len, ret->sig);
}

/* ---- manifests answers ---- */

/* The text a manifests answer's signature covers. */
static int manifests_msg(const char *ns, uint64_t gen, uint64_t first,
			 uint64_t last, const void *body, size_t len, char *msg,
			 size_t cap, size_t *ret_len)
{
	char hex[CHUNK_ID_HEX_LEN + 1];
	chunk_id sum;
	int n, r;

	if (!ns || base_ns_name_check(ns, strlen(ns)) < 0 || gen < 1 ||
	    first > last || (!body && len))
		return -EINVAL;
	r = chunk_id_compute(body ? body : "", len, &sum);
	if (r < 0)
		return r;
	chunk_id_to_hex(&sum, hex);
	n = snprintf(msg, cap,
		     CAT_SIGN_MANIFESTS_MAGIC "\n"
					      "namespace %s\n"
					      "generation %" PRIu64 "\n"
					      "first %" PRIu64 "\n"
					      "last %" PRIu64 "\n"
					      "body-sha256 %s\n",
		     ns, gen, first, last, hex);
	if (n < 0 || (size_t)n >= cap)
		return -EINVAL;
	*ret_len = (size_t)n;
	return 0;
}

int cat_sign_manifests(const struct cat_sign_key *k, const char *ns,
		       uint64_t gen, uint64_t first, uint64_t last,
		       const void *body, size_t len,
		       char ret_hex[CAT_SIGN_SIG_HEX_LEN + 1])
{
	uint8_t sig[CAT_SIGN_SIG_LEN];
	char msg[512];
	size_t ml;
	int r;

	r = manifests_msg(ns, gen, first, last, body, len, msg, sizeof(msg),
			  &ml);
	if (r == 0)
		r = ed_sign(k->priv, msg, ml, sig);
	if (r == 0)
		to_hex(sig, CAT_SIGN_SIG_LEN, ret_hex);
	return r;
}

int cat_verify_manifests(const uint8_t pub[CAT_SIGN_PUB_LEN], const char *ns,
			 uint64_t gen, uint64_t first, uint64_t last,
			 const void *body, size_t len, const char *hex,
			 size_t hex_len)
{
	uint8_t sig[CAT_SIGN_SIG_LEN];
	char msg[512];
	size_t ml;
	int r;

	if (!hex || hex_len != CAT_SIGN_SIG_HEX_LEN ||
	    !is_lower_hex(hex, hex_len))
		return -EBADMSG;
	from_hex(hex, CAT_SIGN_SIG_LEN, sig);
	r = manifests_msg(ns, gen, first, last, body, len, msg, sizeof(msg),
			  &ml);
	if (r < 0)
		return r == -EINVAL ? -EBADMSG : r;
	return ed_verify(pub, msg, ml, sig);
}
