/*
 * catalog/cat_kind.c — the one mapping between catalog kinds and the
 * file-type bits of st_mode, used by the scanner (stat -> kind), the writer
 * and the reader (kind and mode must agree).
 */
#include <sys/stat.h>

#include "catalog/catalog.h"

int cat_kind_ifmt(int kind)
{
	switch (kind) {
	case CAT_REG:
		return S_IFREG;
	case CAT_DIR:
		return S_IFDIR;
	case CAT_LNK:
		return S_IFLNK;
	case CAT_FIFO:
		return S_IFIFO;
	case CAT_CHR:
		return S_IFCHR;
	case CAT_BLK:
		return S_IFBLK;
	case CAT_SOCK:
		return S_IFSOCK;
	}
	return -1;
}

int cat_kind_of_mode(unsigned mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
		return CAT_REG;
	case S_IFDIR:
		return CAT_DIR;
	case S_IFLNK:
		return CAT_LNK;
	case S_IFIFO:
		return CAT_FIFO;
	case S_IFCHR:
		return CAT_CHR;
	case S_IFBLK:
		return CAT_BLK;
	case S_IFSOCK:
		return CAT_SOCK;
	}
	return 0;
}
