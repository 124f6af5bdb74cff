/*
 * tools/ferry_fmt.c — how the ferry command shows times to people, the
 * same in `ferry sync`'s progress line and in `ferry status`.
 */
#include <inttypes.h>
#include <stdio.h>

#include "tools/ferry_priv.h"

void ferry_fmt_hms(int64_t s, char *buf, size_t cap)
{
	if (s < 0)
		snprintf(buf, cap, "--:--:--");
	else
		snprintf(buf, cap, "%" PRId64 ":%02d:%02d", s / 3600,
			 (int)(s / 60 % 60), (int)(s % 60));
}
