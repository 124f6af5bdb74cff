/*
 * tests/unit/tsupport.c — helpers shared by the cmocka unit tests (see
 * tsupport.h): one copy of what every test_*.c used to repeat.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "tsupport.h"

static int rm_cb(const char *path, const struct stat *sb, int flag,
		 struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int tsup_tmpdir(char *dir, size_t cap, const char *name)
{
	const char *tmp = getenv("TMPDIR");
	int n;

	if (!tmp || !tmp[0])
		tmp = "/tmp";
	n = snprintf(dir, cap, "%s/%s.XXXXXX", tmp, name);
	if (n < 0 || (size_t)n >= cap)
		return -1;
	return mkdtemp(dir) ? 0 : -1;
}

int tsup_rm_rf(const char *dir)
{
	return nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

int tsup_free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	assert_true(fd >= 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

int tsup_port_answers(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

	if (fd < 0)
		return 0;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)port);
	ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	return ok;
}

void tsup_write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

void *tsup_read_file(const char *path, size_t *ret_len)
{
	struct stat sb;
	uint8_t *buf;
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &sb), 0);
	buf = malloc((size_t)sb.st_size + 1);
	assert_non_null(buf);
	assert_int_equal(pread(fd, buf, (size_t)sb.st_size, 0), sb.st_size);
	close(fd);
	*ret_len = (size_t)sb.st_size;
	return buf;
}

uint64_t tsup_splitmix64(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

size_t tsup_resident(const char *path, size_t *ret_pages)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), n, i, in = 0, len;
	unsigned char *vec;
	struct stat st;
	void *map;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	assert_true(st.st_size > 0);
	len = (size_t)st.st_size;
	map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(map != MAP_FAILED);
	n = (len + pg - 1) / pg;
	vec = malloc(n);
	assert_non_null(vec);
	assert_int_equal(mincore(map, len, vec), 0);
	for (i = 0; i < n; i++)
		in += vec[i] & 1;
	free(vec);
	munmap(map, len);
	close(fd);
	*ret_pages = n;
	return in;
}

uint8_t *tsup_random_bytes(size_t n, uint64_t seed)
{
	uint8_t *b = malloc(n ? n : 1);

	assert_non_null(b);
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(tsup_splitmix64(&seed) >> 24);
	return b;
}

void tsup_flip_byte(const char *path, uint64_t off, uint8_t mask)
{
	uint8_t b;
	int fd = open(path, O_RDWR);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
	b ^= mask;
	assert_int_equal(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

/* SIGTERM to pid, reap it; its wait status into *st. 0 or -1 (said). */
static int term_and_reap(pid_t pid, const char *what, int *st)
{
	pid_t w;

	if (kill(pid, SIGTERM) < 0) {
		fprintf(stderr, "%s pid %ld: kill: %s\n", what, (long)pid,
			strerror(errno));
		return -1;
	}
	do
		w = waitpid(pid, st, 0);
	while (w < 0 && errno == EINTR);
	if (w != pid) {
		fprintf(stderr, "%s pid %ld: waitpid: %s\n", what, (long)pid,
			strerror(errno));
		return -1;
	}
	return 0;
}

static void say_end(pid_t pid, const char *what, int st)
{
	if (WIFEXITED(st))
		fprintf(stderr, "%s pid %ld: exit status %d after SIGTERM\n",
			what, (long)pid, WEXITSTATUS(st));
	else
		fprintf(stderr, "%s pid %ld: killed by signal %d (%s)\n", what,
			(long)pid, WTERMSIG(st), strsignal(WTERMSIG(st)));
}

int tsup_stop_child(pid_t pid, const char *what)
{
	int st;

	if (term_and_reap(pid, what, &st) < 0)
		return -1;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	say_end(pid, what, st);
	return -1;
}

int tsup_stop_server(pid_t pid, const char *what)
{
	int st;

	if (term_and_reap(pid, what, &st) < 0)
		return -1;
	if ((WIFEXITED(st) && WEXITSTATUS(st) == 0) ||
	    (WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM))
		return 0;
	say_end(pid, what, st);
	return -1;
}

int tsup_log_clean(const char *path)
{
	static const char *const marks[] = {
	    "ERROR: AddressSanitizer",
	    "ERROR: LeakSanitizer",
	    "runtime error:",
	};
	struct stat sb;
	char *buf;
	ssize_t got;
	int fd = open(path, O_RDONLY), dirty = 0;

	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	if (fstat(fd, &sb) < 0 || !(buf = malloc((size_t)sb.st_size + 1))) {
		close(fd);
		return -1;
	}
	got = pread(fd, buf, (size_t)sb.st_size, 0);
	close(fd);
	if (got < 0) {
		free(buf);
		return -1;
	}
	for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++)
		if (memmem(buf, (size_t)got, marks[i], strlen(marks[i])))
			dirty = 1;
	if (dirty) {
		fprintf(stderr, "sanitizer report in %s:\n", path);
		fwrite(buf, 1, (size_t)got, stderr);
	}
	free(buf);
	return dirty ? -1 : 0;
}

cat_writer *tsup_cat_begin(const char *path)
{
	struct cat_meta m;
	struct cat_inode in;
	cat_writer *w = NULL;

	memset(&m, 0, sizeof(m));
	m.generation = 1;
	chunk_params_default(&m.params);
	assert_int_equal(cat_writer_open(path, &m, &w), 0);
	memset(&in, 0, sizeof(in));
	in.ino = CAT_ROOT_INO;
	in.kind = CAT_DIR;
	in.mode = S_IFDIR | 0755;
	in.nlink = 2;
	assert_int_equal(cat_writer_add_inode(w, &in, NULL, 0), 0);
	return w;
}

static void cert_ext(X509 *issuer, X509 *x, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509_EXTENSION *e;

	X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
	e = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
	assert_non_null(e);
	assert_int_equal(X509_add_ext(x, e, -1), 1);
	X509_EXTENSION_free(e);
}

static void *pem_read(const char *path, int is_key)
{
	FILE *f = fopen(path, "r");
	void *p;

	assert_non_null(f);
	p = is_key ? (void *)PEM_read_PrivateKey(f, NULL, NULL, NULL)
		   : (void *)PEM_read_X509(f, NULL, NULL, NULL);
	fclose(f);
	assert_non_null(p);
	return p;
}

void tsup_cert_make(const char *cert, const char *key, const char *cn,
		    const char *ca_cert, const char *ca_key, long from_s,
		    long to_s, int rsa)
{
	EVP_PKEY *pk = rsa ? EVP_RSA_gen(2048) : EVP_EC_gen("P-256");
	EVP_PKEY *sign_key = pk;
	X509 *x = X509_new(), *ca = NULL;
	BIGNUM *bn = BN_new();
	FILE *f;

	assert_non_null(pk);
	assert_non_null(x);
	assert_non_null(bn);
	assert_int_equal(X509_set_version(x, 2), 1);
	/* a random serial: certificates of one CA must not share one */
	assert_int_equal(BN_rand(bn, 63, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY),
			 1);
	assert_non_null(BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)));
	assert_non_null(X509_gmtime_adj(X509_getm_notBefore(x), from_s));
	assert_non_null(X509_gmtime_adj(X509_getm_notAfter(x), to_s));
	assert_int_equal(X509_set_pubkey(x, pk), 1);
	assert_int_equal(X509_NAME_add_entry_by_txt(
			     X509_get_subject_name(x), "CN", MBSTRING_ASC,
			     (const unsigned char *)cn, -1, -1, 0),
			 1);
	if (ca_cert) {
		ca = pem_read(ca_cert, 0);
		sign_key = pem_read(ca_key, 1);
		assert_int_equal(
		    X509_set_issuer_name(x, X509_get_subject_name(ca)), 1);
		cert_ext(ca, x, NID_basic_constraints, "CA:FALSE");
		cert_ext(ca, x, NID_subject_alt_name,
			 "IP:127.0.0.1,DNS:localhost");
	} else {
		assert_int_equal(
		    X509_set_issuer_name(x, X509_get_subject_name(x)), 1);
		cert_ext(x, x, NID_basic_constraints, "critical,CA:TRUE");
		cert_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign");
		cert_ext(x, x, NID_subject_key_identifier, "hash");
	}
	assert_true(X509_sign(x, sign_key, EVP_sha256()) > 0);
	f = fopen(cert, "w");
	assert_non_null(f);
	assert_int_equal(PEM_write_X509(f, x), 1);
	assert_int_equal(fclose(f), 0);
	f = fopen(key, "w");
	assert_non_null(f);
	assert_int_equal(PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL),
			 1);
	assert_int_equal(fclose(f), 0);
	if (sign_key != pk)
		EVP_PKEY_free(sign_key);
	X509_free(ca);
	X509_free(x);
	EVP_PKEY_free(pk);
	BN_free(bn);
}
