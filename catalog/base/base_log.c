/*
 * catalog/base/base_log.c — the one logger of every ferry program.
 *
 * Each event is formatted into a buffer of its own, escaped so it stays
 * one line of valid UTF-8, and written with one write(2) to stderr: lines
 * from FUSE workers, the fetch loop and backfill never interleave, and no
 * stdio lock is taken on the hot path. The program name, the level and the
 * stamp switch are set once in main before any thread starts and only read
 * afterwards, which is why they may be file-scope variables here.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "catalog/base/base.h"

static const char *log_prog = "ferry";
static int log_level = BASE_LOG_INFO;
static int log_stamp;

void base_log_init(const char *prog, int level)
{
	if (prog && prog[0])
		log_prog = prog;
	if (level < BASE_LOG_ERROR)
		level = BASE_LOG_ERROR;
	if (level > BASE_LOG_DEBUG)
		level = BASE_LOG_DEBUG;
	log_level = level;
}

void base_log_stamps(int on)
{
	log_stamp = on != 0;
}

const char *base_log_prog(void)
{
	return log_prog;
}

int base_log_level(void)
{
	return log_level;
}

int base_log_on(int level)
{
	return level <= log_level;
}

const char *base_errname(int err)
{
	const char *s = strerrorname_np(err < 0 ? -err : err);

	return s ? s : "EUNKNOWN";
}

static const char *level_word(int level)
{
	switch (level) {
	case BASE_LOG_ERROR:
		return "error: ";
	case BASE_LOG_WARN:
		return "warning: ";
	case BASE_LOG_DEBUG:
		return "debug: ";
	default:
		return "";
	}
}

/* Write the finished line; a short write to a full disk or a closed pipe
 * has nowhere better to be reported. */
static void emit(const char *line, size_t len)
{
	while (len > 0) {
		ssize_t n = write(STDERR_FILENO, line, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		line += n;
		len -= (size_t)n;
	}
}

static void vlog_err(int level, int err, const char *fmt, va_list ap)
{
	char raw[BASE_LOG_LINE_MAX], line[BASE_LOG_LINE_MAX + 8];
	size_t n = 0, need;
	int k;

	if (!base_log_on(level))
		return;
	k = vsnprintf(raw, sizeof(raw), fmt, ap);
	n = k < 0 ? 0 : (size_t)k;
	if (n >= sizeof(raw))
		n = sizeof(raw) - 1;
	if (err) {
		/* strerror_r's GNU form returns the text. */
		char ebuf[128];
		const char *et =
		    strerror_r(err < 0 ? -err : err, ebuf, sizeof(ebuf));

		k = snprintf(raw + n, sizeof(raw) - n, "%serr=\"%s\"",
			     n ? " " : "", et);
		n = k < 0 ? n : n + (size_t)k;
		if (n >= sizeof(raw))
			n = sizeof(raw) - 1;
	}
	need = 0;
	if (log_stamp) {
		struct timespec ts;
		struct tm tm;

		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		need = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
		k = snprintf(line + need, sizeof(line) - need, ".%03ldZ ",
			     ts.tv_nsec / 1000000L);
		need += k < 0 ? 0 : (size_t)k;
	}
	k = snprintf(line + need, sizeof(line) - need, "%s: %s", log_prog,
		     level_word(level));
	need += k < 0 ? 0 : (size_t)k;
	if (need > BASE_LOG_LINE_MAX - 8)
		need = BASE_LOG_LINE_MAX - 8;
	/* Room is kept for "...": the escape writes whole units only (never
	 * half a UTF-8 sequence or an escape), and what it wrote holds no NUL,
	 * so its length is strlen. */
	if (base_text_escape(line + need, BASE_LOG_LINE_MAX - 3 - need, raw,
			     n) > strlen(line + need)) {
		need += strlen(line + need);
		memcpy(line + need, "...", 3);
		need += 3;
	} else {
		need += strlen(line + need);
	}
	line[need++] = '\n';
	emit(line, need);
}

void base_vlog(int level, const char *fmt, va_list ap)
{
	vlog_err(level, 0, fmt, ap);
}

void base_log(int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog_err(level, 0, fmt, ap);
	va_end(ap);
}

void base_log_err(int level, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog_err(level, err, fmt, ap);
	va_end(ap);
}
