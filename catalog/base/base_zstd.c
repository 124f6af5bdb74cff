/*
 * catalog/base/base_zstd.c — the one translation of zstd's result codes,
 * for the frame codec, the catalog's transfer compression and the
 * hydrator's catalog download alike. Nothing is logged: the caller knows
 * which chunk or file it was.
 */
#include <errno.h>

#include <zstd.h>
#include <zstd_errors.h>

#include "catalog/base/base.h"

int base_zstd_errno(size_t code, int decoding)
{
	switch (ZSTD_getErrorCode(code)) {
	case ZSTD_error_no_error:
		return 0;
	case ZSTD_error_memory_allocation:
		return -ENOMEM;
	case ZSTD_error_dstSize_tooSmall:
		return decoding ? -EBADMSG : -ENOBUFS;
	default:
		return decoding ? -EBADMSG : -EIO;
	}
}
