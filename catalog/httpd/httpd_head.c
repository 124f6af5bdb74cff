/*
 * catalog/httpd/httpd_head.c — the response writer: every head a ferry
 * server sends is made here, so the three servers agree on the reason
 * phrases, the Server and Date headers, and on how a body is framed.
 *
 * Framing: a known length is Content-Length; a streamed body is chunked
 * for an HTTP/1.1 client and, for HTTP/1.0 (which has no chunks), ends
 * with the connection, which the head then says (Connection: close).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "catalog/httpd/httpd.h"

const char *httpd_reason(int status)
{
	switch (status) {
	case 100:
		return "Continue";
	case 200:
		return "OK";
	case 204:
		return "No Content";
	case 206:
		return "Partial Content";
	case 304:
		return "Not Modified";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 409:
		return "Conflict";
	case 410:
		return "Gone";
	case 411:
		return "Length Required";
	case 413:
		return "Payload Too Large";
	case 414:
		return "URI Too Long";
	case 416:
		return "Range Not Satisfiable";
	case 431:
		return "Request Header Fields Too Large";
	case 500:
		return "Internal Server Error";
	case 501:
		return "Not Implemented";
	case 503:
		return "Service Unavailable";
	default:
		return status >= 500 ? "Internal Server Error" : "Error";
	}
}

int httpd_head_format(struct httpd_head *h, char *buf, size_t cap)
{
	char date[64], len_line[64] = "", server[160] = "", ctype[160] = "";
	const char *conn_line = "";
	struct tm tm;
	time_t now = time(NULL);
	int n;

	h->chunked = 0;
	if (!gmtime_r(&now, &tm) ||
	    !strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm))
		return -ENOBUFS;
	if (h->length >= 0) {
		snprintf(len_line, sizeof(len_line),
			 "Content-Length: %" PRId64 "\r\n", h->length);
	} else if (h->http_minor >= 1) {
		h->chunked = 1;
		snprintf(len_line, sizeof(len_line),
			 "Transfer-Encoding: chunked\r\n");
	} else {
		h->keep_alive = 0; /* HTTP/1.0: the close ends the body */
	}
	if (!h->keep_alive)
		conn_line = "Connection: close\r\n";
	else if (h->http_minor == 0)
		conn_line = "Connection: keep-alive\r\n";
	if (h->server &&
	    (size_t)snprintf(server, sizeof(server), "Server: %s\r\n",
			     h->server) >= sizeof(server))
		return -ENOBUFS;
	if (h->ctype &&
	    (size_t)snprintf(ctype, sizeof(ctype), "Content-Type: %s\r\n",
			     h->ctype) >= sizeof(ctype))
		return -ENOBUFS;
	n = snprintf(buf, cap,
		     "HTTP/1.1 %d %s\r\n"
		     "%sDate: %s\r\n"
		     "%s%s%s%s\r\n",
		     h->status, httpd_reason(h->status), server, date, ctype,
		     len_line, h->extra ? h->extra : "", conn_line);
	if (n < 0 || (size_t)n >= cap)
		return -ENOBUFS;
	return n;
}

size_t httpd_chunk_prefix(uint64_t len, char buf[HTTPD_CHUNK_PREFIX_MAX])
{
	int n = snprintf(buf, HTTPD_CHUNK_PREFIX_MAX, "%" PRIx64 "\r\n", len);

	return n > 0 ? (size_t)n : 0;
}
