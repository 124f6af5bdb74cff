/*
 * catalog/cat_name.c — safety checks for names that arrive from untrusted
 * input (a catalog from the wire, a protocol message, a scanner readdir).
 *
 * A name that passes cat_name_check is exactly one path component: joining
 * it under a directory can never climb out of that directory or address
 * anything but a direct child. Both sites call these before a name is
 * stored, served or used to build a path.
 */
#include <string.h>
#include <errno.h>

#include "catalog/catalog.h"

int cat_name_check(const void *name, size_t len)
{
	const char *s = name;

	if (!name || len == 0 || len > CAT_NAME_MAX)
		return -EINVAL;
	/* "." and ".." are the only components that do not name a child. */
	if (s[0] == '.' && (len == 1 || (len == 2 && s[1] == '.')))
		return -EINVAL;
	if (memchr(s, '/', len) || memchr(s, '\0', len))
		return -EINVAL;
	return 0;
}

int cat_xattr_name_check(const void *name, size_t len)
{
	/* Only NUL is special: the listxattr format separates names by it. */
	if (!name || len == 0 || len > CAT_XATTR_NAME_MAX)
		return -EINVAL;
	if (memchr(name, '\0', len))
		return -EINVAL;
	return 0;
}
