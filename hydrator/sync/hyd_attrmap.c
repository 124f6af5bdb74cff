/*
 * hydrator/sync/hyd_attrmap.c — rsync's --chmod, --chown, --usermap and
 * --groupmap: the source's modes and owners as DEST is to have them.
 *
 * The writer applies the map to each catalog entry before it compares
 * or writes (hyd_materialize.c), so -i's letters, the up-to-date checks
 * and the metadata set all see the mapped values, as rsync's do.
 *
 * --chmod: a comma list of rsync's items. Each may start with D (only
 * directories) or F (only non-directories), then either an octal mode
 * (its permission bits replace the entry's) or chmod(1)'s symbolic form:
 * [ugoa]*([-+=][rwxXst]*)+. Without a who letter the bits the umask
 * masks are left out (chmod(1)'s and rsync's rule: "+w" under umask 022
 * is u+w). X is x for a directory, or for a file with an x bit already.
 * chmod(1)'s copy forms (g=u) are refused.
 *
 * --usermap, --groupmap: a comma list of FROM:TO; FROM is an id, a
 * range LOW-HIGH, a name (looked up here: the catalog keeps numbers, as
 * rsync --numeric-ids does) or *; TO an id or a name. The first match
 * wins. --chown USER:GROUP (either part may be empty) maps every entry.
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hydrator/sync/hyd_sync_priv.h"

#define CHMOD_MAX 32
#define MAP_MAX 64

struct chmod_op {
	uint8_t only; /* 0, 'D' or 'F' */
	uint8_t op;   /* '+', '-', '=', or 0 for an octal mode */
	uint8_t x_if; /* X: x only for a directory or an executable */
	uint16_t who; /* bits the item may touch (07777 without who) */
	uint16_t bits;
	int who_given; /* 0: the umask applies */
};

struct id_map {
	uint32_t lo, hi; /* lo > hi: "*" */
	uint32_t to;
};

struct hyd_attrmap {
	struct chmod_op ops[CHMOD_MAX];
	size_t nops;
	struct id_map users[MAP_MAX], groups[MAP_MAX];
	size_t nusers, ngroups;
	mode_t umask;
};

static int parse_octal(const char *s, size_t n, uint16_t *ret)
{
	unsigned v = 0;
	size_t i;

	if (n == 0 || n > 4)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '7')
			return -EINVAL;
		v = v * 8 + (unsigned)(s[i] - '0');
	}
	*ret = (uint16_t)v;
	return 0;
}

/* One item of --chmod, [s, s + n). */
static int chmod_item(hyd_attrmap *m, const char *s, size_t n)
{
	uint8_t only = 0;
	uint16_t who = 0, v;
	size_t i = 0;
	int who_given;

	if (n && (s[0] == 'D' || s[0] == 'F')) {
		only = (uint8_t)s[0];
		i++;
	}
	if (i < n && s[i] >= '0' && s[i] <= '7') {
		if (parse_octal(s + i, n - i, &v) < 0 || m->nops == CHMOD_MAX)
			return -EINVAL;
		m->ops[m->nops++] = (struct chmod_op){only, 0, 0, 07777, v, 1};
		return 0;
	}
	for (; i < n && strchr("ugoa", s[i]); i++)
		who |= s[i] == 'u'   ? 04700
		       : s[i] == 'g' ? 02070
		       : s[i] == 'o' ? 01007
				     : 07777;
	who_given = who != 0;
	if (!who)
		who = 07777;
	if (i == n)
		return -EINVAL; /* a who with no operator */
	while (i < n) {
		struct chmod_op o = {only, 0, 0, who, 0, who_given};

		if (!strchr("+-=", s[i]))
			return -EINVAL;
		o.op = (uint8_t)s[i++];
		for (; i < n && !strchr("+-=", s[i]); i++) {
			switch (s[i]) {
			case 'r':
				o.bits |= 0444;
				break;
			case 'w':
				o.bits |= 0222;
				break;
			case 'x':
				o.bits |= 0111;
				break;
			case 'X':
				o.x_if = 1;
				break;
			case 's':
				o.bits |= 06000;
				break;
			case 't':
				o.bits |= 01000;
				break;
			default:
				return -EINVAL; /* u, g, o copies too */
			}
		}
		if (m->nops == CHMOD_MAX)
			return -EINVAL;
		m->ops[m->nops++] = o;
	}
	return 0;
}

int hyd_attrmap_chmod(hyd_attrmap *m, const char *spec)
{
	const char *p = spec, *e;

	if (!*spec)
		return -EINVAL;
	for (;;) {
		e = strchr(p, ',');
		if (chmod_item(m, p, e ? (size_t)(e - p) : strlen(p)) < 0)
			return -EINVAL;
		if (!e)
			return 0;
		p = e + 1;
	}
}

/* An id, or a name of the passwd (user) or group database. */
static int id_of(const char *s, size_t n, int user, uint32_t *ret)
{
	char name[256], *end;
	unsigned long v;

	if (n == 0 || n >= sizeof(name))
		return -EINVAL;
	memcpy(name, s, n);
	name[n] = '\0';
	if (name[0] >= '0' && name[0] <= '9') {
		errno = 0;
		v = strtoul(name, &end, 10);
		if (errno || *end || v > UINT32_MAX - 1)
			return -EINVAL;
		*ret = (uint32_t)v;
		return 0;
	}
	if (user) {
		struct passwd *pw = getpwnam(name);

		if (!pw)
			return -ENOENT;
		*ret = pw->pw_uid;
	} else {
		struct group *gr = getgrnam(name);

		if (!gr)
			return -ENOENT;
		*ret = gr->gr_gid;
	}
	return 0;
}

static int map_add(hyd_attrmap *m, int user, const char *from, size_t fn,
		   const char *to, size_t tn)
{
	struct id_map *v = user ? m->users : m->groups;
	size_t *n = user ? &m->nusers : &m->ngroups;
	struct id_map e = {1, 0, 0};
	const char *dash = memchr(from, '-', fn);
	int r;

	if (*n == MAP_MAX)
		return -EINVAL;
	if (fn == 1 && from[0] == '*') {
		/* lo > hi: any */
	} else if (dash && from[0] >= '0' && from[0] <= '9') {
		r = id_of(from, (size_t)(dash - from), 1, &e.lo);
		if (r == 0)
			r = id_of(dash + 1, fn - (size_t)(dash - from) - 1, 1,
				  &e.hi);
		if (r < 0 || e.lo > e.hi)
			return -EINVAL;
	} else {
		r = id_of(from, fn, user, &e.lo);
		if (r < 0)
			return r;
		e.hi = e.lo;
	}
	r = id_of(to, tn, user, &e.to);
	if (r < 0)
		return r;
	v[(*n)++] = e;
	return 0;
}

int hyd_attrmap_ids(hyd_attrmap *m, int user, const char *spec)
{
	const char *p = spec, *e, *colon;
	size_t n;
	int r;

	if (!*spec)
		return -EINVAL;
	for (;;) {
		e = strchr(p, ',');
		n = e ? (size_t)(e - p) : strlen(p);
		colon = memchr(p, ':', n);
		if (!colon)
			return -EINVAL;
		r = map_add(m, user, p, (size_t)(colon - p), colon + 1,
			    n - (size_t)(colon - p) - 1);
		if (r < 0)
			return r;
		if (!e)
			return 0;
		p = e + 1;
	}
}

int hyd_attrmap_chown(hyd_attrmap *m, const char *spec)
{
	const char *colon = strchr(spec, ':');
	size_t un = colon ? (size_t)(colon - spec) : strlen(spec);
	int r = 0;

	if (un)
		r = map_add(m, 1, "*", 1, spec, un);
	if (r == 0 && colon && colon[1])
		r = map_add(m, 0, "*", 1, colon + 1, strlen(colon + 1));
	if (r == 0 && !un && !(colon && colon[1]))
		r = -EINVAL;
	return r;
}

static uint32_t map_id(const struct id_map *v, size_t n, uint32_t id)
{
	size_t i;

	for (i = 0; i < n; i++)
		if ((v[i].lo > v[i].hi) || (id >= v[i].lo && id <= v[i].hi))
			return v[i].to;
	return id;
}

void hyd_attrmap_apply(const hyd_attrmap *m, struct cat_inode *in)
{
	uint32_t mode = in->mode & 07777;
	size_t i;

	if (!m)
		return;
	in->uid = map_id(m->users, m->nusers, in->uid);
	in->gid = map_id(m->groups, m->ngroups, in->gid);
	if (in->kind == CAT_LNK)
		return; /* a symlink's mode is not its own to set */
	for (i = 0; i < m->nops; i++) {
		const struct chmod_op *o = &m->ops[i];
		uint32_t bits = o->bits, who = o->who;

		if ((o->only == 'D' && in->kind != CAT_DIR) ||
		    (o->only == 'F' && in->kind == CAT_DIR))
			continue;
		if (!o->op) {
			mode = o->bits;
			continue;
		}
		if (o->x_if && (in->kind == CAT_DIR || (mode & 0111)))
			bits |= 0111;
		if (!o->who_given)
			bits &= ~(uint32_t)m->umask;
		bits &= who;
		if (o->op == '+')
			mode |= bits;
		else if (o->op == '-')
			mode &= ~bits;
		else
			mode = (mode & ~(who & 0777)) | bits;
	}
	in->mode = (in->mode & ~07777u) | (mode & 07777);
}

int hyd_attrmap_new(hyd_attrmap **ret)
{
	mode_t um = umask(0);

	umask(um);
	*ret = calloc(1, sizeof(**ret));
	if (!*ret)
		return -ENOMEM;
	(*ret)->umask = um & 0777;
	return 0;
}

int hyd_attrmap_active(const hyd_attrmap *m)
{
	return m && (m->nops || m->nusers || m->ngroups);
}

void hyd_attrmap_free(hyd_attrmap *m)
{
	free(m);
}
