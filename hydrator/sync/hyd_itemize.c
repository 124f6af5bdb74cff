/*
 * hydrator/sync/hyd_itemize.c — what `ferry sync -i` says about one entry,
 * in rsync's itemized format "YXcstpoguax":
 *   Y  '>' file content written, 'c' other entry created or recreated,
 *      'h' hard link made, '.' attributes only;
 *   X  'f' file, 'd' directory, 'L' symlink, 'D' device, 'S' fifo/socket;
 *   then, for an entry that exists in DEST, one letter per attribute that
 *   differs, else '.': c content (a file whose size and time match but
 *   whose bytes do not; a symlink's target; a device's number), s size,
 *   t modification time (whole seconds, as rsync compares them), p
 *   permissions, o owner and g group (when owners are set), u and a
 *   never (no access/create times, no ACLs apart from their xattrs), x
 *   extended attributes (one of the catalog's is missing or differs);
 *   for a new entry "+++++++++".
 * A deletion is "*deleting". Nothing here changes DEST.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include "hydrator/sync/hyd_sync_internal.h"

char hyd_item_type(int kind)
{
	switch (kind) {
	case CAT_REG:
		return 'f';
	case CAT_DIR:
		return 'd';
	case CAT_LNK:
		return 'L';
	case CAT_CHR:
	case CAT_BLK:
		return 'D';
	default:
		return 'S';
	}
}

void hyd_item_new(char code[HYD_ITEM_LEN], char y, int kind)
{
	code[0] = y;
	code[1] = hyd_item_type(kind);
	memset(code + 2, '+', 9);
	code[11] = '\0';
}

/* 1 when a catalog xattr of ino is missing at the entry or differs. */
static int xattrs_differ(struct hyd_mat *m, int dirfd, const char *name,
			 uint64_t ino)
{
	char proc[64 + CAT_NAME_MAX], *names = NULL, *p;
	uint8_t *val = NULL, *cur = NULL;
	size_t nlen = 0, vlen;
	ssize_t got;
	int r, differ = 0;

	r = cat_listxattr(m->cat, ino, NULL, 0, &nlen);
	if (r < 0 || nlen == 0)
		return 0;
	names = malloc(nlen);
	val = malloc(CAT_XATTR_VALUE_MAX);
	cur = malloc(CAT_XATTR_VALUE_MAX + 1);
	if (!names || !val || !cur ||
	    cat_listxattr(m->cat, ino, names, nlen, &nlen) < 0)
		goto out;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d/%s", dirfd, name);
	for (p = names; p < names + nlen && !differ; p += strlen(p) + 1) {
		if (cat_getxattr(m->cat, ino, p, strlen(p), val,
				 CAT_XATTR_VALUE_MAX, &vlen) < 0)
			break;
		got = lgetxattr(proc, p, cur, CAT_XATTR_VALUE_MAX + 1);
		if (got < 0 && strncmp(p, "user.", 5) &&
		    (errno == ENOTSUP || errno == EPERM || errno == EACCES))
			continue; /* one we would not set either */
		differ = got < 0 || (size_t)got != vlen ||
			 memcmp(cur, val, vlen) != 0;
	}
out:
	free(names);
	free(val);
	free(cur);
	return differ;
}

void hyd_item_attrs(struct hyd_mat *m, int dirfd, const char *name,
		    const struct stat *st, const struct cat_inode *in, char y,
		    int content, char code[HYD_ITEM_LEN])
{
	code[0] = y;
	code[1] = hyd_item_type(in->kind);
	memset(code + 2, '.', 9);
	code[11] = '\0';
	if (content)
		code[2] = 'c';
	if (in->kind == CAT_REG && (uint64_t)st->st_size != in->size)
		code[3] = 's';
	/* rsync compares whole seconds (--modify-window 0); floor division
	 * for times before 1970 */
	if ((int64_t)st->st_mtim.tv_sec !=
	    in->mtime_ns / 1000000000 - (in->mtime_ns % 1000000000 < 0))
		code[4] = 't';
	if (in->kind != CAT_LNK && (st->st_mode & 07777) != (in->mode & 07777))
		code[5] = 'p';
	if (m->owners && st->st_uid != in->uid)
		code[6] = 'o';
	if (m->owners && st->st_gid != in->gid)
		code[7] = 'g';
	if (dirfd >= 0 && xattrs_differ(m, dirfd, name, in->ino))
		code[10] = 'x';
}

int hyd_item_changed(const char code[HYD_ITEM_LEN])
{
	if (code[0] != '.')
		return 1;
	for (int i = 2; i < 11; i++)
		if (code[i] != '.')
			return 1;
	return 0;
}

void hyd_item_emit(struct hyd_mat *m, const char *code, const char *path,
		   int is_dir, const char *extra)
{
	size_t n = strlen(path);
	char *buf;

	if (!m->item)
		return;
	buf = malloc(n + 3);
	if (!buf)
		return;
	if (n == 0)
		memcpy(buf, "./", 3);
	else
		snprintf(buf, n + 3, "%s%s", path, is_dir ? "/" : "");
	m->item(m->item_arg, code, buf, extra ? extra : "");
	free(buf);
}
