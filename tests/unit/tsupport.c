/*
 * tests/unit/tsupport.c — helpers shared by the cmocka unit tests (see
 * tsupport.h): one copy of what every test_*.c used to repeat.
 */
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tsupport.h"

static int rm_cb(const char *path, const struct stat *sb, int flag,
		 struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
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
