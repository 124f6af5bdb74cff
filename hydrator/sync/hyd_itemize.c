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

#include "hydrator/sync/hyd_sync_priv.h"

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

int hyd_sync__xattrs_cmp(cat_reader *cat, uint64_t ino, int dirfd,
			 const char *name, hyd_xattr_cmp_cb cb, void *arg)
{
	char proc[64 + CAT_NAME_MAX], *names = NULL, *p;
	uint8_t *want = NULL, *have = NULL;
	size_t nlen = 0, wlen;
	ssize_t hlen;
	int r = 0;

	if (cat_listxattr(cat, ino, NULL, 0, &nlen) < 0 || nlen == 0)
		return 0;
	names = malloc(nlen);
	want = malloc(CAT_XATTR_VALUE_MAX);
	have = malloc(CAT_XATTR_VALUE_MAX + 1);
	if (!names || !want || !have) {
		r = -ENOMEM;
		goto out;
	}
	if (cat_listxattr(cat, ino, names, nlen, &nlen) < 0)
		goto out;
	/* l*xattr through the directory fd's magic link: the last
	 * component is not followed. name NULL: the directory itself. */
	if (name)
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d/%s", dirfd,
			 name);
	for (p = names; p < names + nlen; p += strlen(p) + 1) {
		if (cat_getxattr(cat, ino, p, strlen(p), want,
				 CAT_XATTR_VALUE_MAX, &wlen) < 0)
			continue;
		hlen = name
			   ? lgetxattr(proc, p, have, CAT_XATTR_VALUE_MAX + 1)
			   : fgetxattr(dirfd, p, have, CAT_XATTR_VALUE_MAX + 1);
		if (cb(arg, p,
		       hlen >= 0 && (size_t)hlen == wlen &&
			   memcmp(have, want, wlen) == 0,
		       hlen < 0 ? errno : 0))
			break;
	}
out:
	free(names);
	free(want);
	free(have);
	return r;
}

/* For the 'x' letter: stop at the first catalog xattr missing or
 * different, but one the kernel would not let us set either. */
static int differ_cb(void *arg, const char *xname, int same, int missing)
{
	int *differ = arg;

	if (!same && missing && strncmp(xname, "user.", 5) &&
	    (missing == ENOTSUP || missing == EPERM || missing == EACCES))
		return 0;
	*differ = !same;
	return *differ;
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
		in->mtime_ns / 1000000000 - (in->mtime_ns % 1000000000 < 0) &&
	    !(in->kind == CAT_DIR && m->omit_dir_times))
		code[4] = 't';
	if (in->kind != CAT_LNK && (st->st_mode & 07777) != (in->mode & 07777))
		code[5] = 'p';
	if (m->owners && st->st_uid != in->uid)
		code[6] = 'o';
	if (m->owners && st->st_gid != in->gid)
		code[7] = 'g';
	if (dirfd >= 0) {
		int differ = 0;

		hyd_sync__xattrs_cmp(m->cat, in->ino, dirfd,
				     name[0] ? name : NULL, differ_cb, &differ);
		if (differ)
			code[10] = 'x';
	}
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
		   int is_dir, const char *extra, const struct cat_inode *in)
{
	struct hyd_item_attrs a;
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
	if (in) {
		a.size = in->kind == CAT_DIR ? 0 : in->size;
		a.mtime_ns = in->mtime_ns;
		a.mode = in->mode;
		a.uid = in->uid;
		a.gid = in->gid;
	}
	m->item(m->item_arg, code, buf, extra ? extra : "", in ? &a : NULL);
	free(buf);
}
