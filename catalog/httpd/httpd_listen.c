/*
 * catalog/httpd/httpd_listen.c — where a server listens: the one HOST:PORT
 * rule of every ferry server (httpd.h says it), resolving it, a blocking
 * listening socket for the server that does not run on libuv, the name
 * of what was bound, and whether an address is loopback.
 *
 * Port 0 is allowed everywhere: the replicator always took it, and "any
 * free port" is what a test or a second instance on one host wants; each
 * server then logs the port it got (httpd_listen_name), never ":0".
 * IPv6 needs its brackets, because "::1:8700" is itself an IPv6 address
 * and splitting it at its last ':' would be a guess.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "catalog/httpd/httpd.h"

int httpd_listen_split(const char *s, char *host, size_t cap,
		       uint16_t *ret_port)
{
	const char *h = s, *colon;
	uint64_t port;
	size_t hl;

	if (!s)
		return -EINVAL;
	if (s[0] == '[') {
		const char *end = strchr(s, ']');

		if (!end || end[1] != ':' ||
		    memchr(s + 1, '[', (size_t)(end - s - 1)))
			return -EINVAL;
		h = s + 1;
		hl = (size_t)(end - h);
		colon = end + 1;
	} else {
		colon = strchr(s, ':');
		/* one ':' only, and no bracket in the host */
		if (!colon || strchr(colon + 1, ':') ||
		    strcspn(s, "[]") < (size_t)(colon - s))
			return -EINVAL;
		hl = (size_t)(colon - s);
	}
	if (hl == 0 || hl >= cap ||
	    base_parse_u64(colon + 1, 0, 65535, &port) < 0)
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*ret_port = (uint16_t)port;
	return 0;
}

int httpd_listen_resolve(const char *s, struct sockaddr_storage *ret)
{
	char host[HTTPD_HOST_MAX];
	struct addrinfo hints, *ai = NULL;
	uint16_t port;

	if (httpd_listen_split(s, host, sizeof(host), &port) < 0)
		return -EINVAL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	if (getaddrinfo(host, NULL, &hints, &ai) != 0 || !ai)
		return -EADDRNOTAVAIL;
	memset(ret, 0, sizeof(*ret));
	if (ai->ai_addrlen > sizeof(*ret) ||
	    (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)) {
		freeaddrinfo(ai);
		return -EADDRNOTAVAIL;
	}
	memcpy(ret, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	if (ret->ss_family == AF_INET)
		((struct sockaddr_in *)ret)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ret)->sin6_port = htons(port);
	return 0;
}

int httpd_listen_socket(const struct sockaddr_storage *sa, int backlog)
{
	socklen_t len = sa->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						  : sizeof(struct sockaddr_in);
	int fd, one = 1, r;

	fd = socket(sa->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* a restart finds the port in TIME_WAIT: take it anyway, as libuv's
	 * bind does for the other servers */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)sa, len) < 0 ||
	    listen(fd, backlog) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

int httpd_listen_name(const char *s, const struct sockaddr *bound, char *buf,
		      size_t cap)
{
	char host[HTTPD_HOST_MAX];
	uint16_t port;
	int n;

	if (httpd_listen_split(s, host, sizeof(host), &port) < 0)
		return -EINVAL;
	if (bound && bound->sa_family == AF_INET)
		port = ntohs(((const struct sockaddr_in *)bound)->sin_port);
	else if (bound && bound->sa_family == AF_INET6)
		port = ntohs(((const struct sockaddr_in6 *)bound)->sin6_port);
	n = snprintf(buf, cap, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host,
		     (unsigned)port);
	return n < 0 || (size_t)n >= cap ? -ENOBUFS : 0;
}

int httpd_sockaddr_loopback(const struct sockaddr *sa)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)
				  ->sin_addr.s_addr) >>
			24) == 127;
	if (sa->sa_family != AF_INET6)
		return 0;
	if (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
		return 1;
	return IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) &&
	       s6->sin6_addr.s6_addr[12] == 127;
}

int httpd_host_loopback(const char *host)
{
	struct addrinfo hints, *res = NULL, *a;
	int lo = 1;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	if (getaddrinfo(host, NULL, &hints, &res) != 0)
		return 0;
	for (a = res; a; a = a->ai_next)
		if (!httpd_sockaddr_loopback(a->ai_addr))
			lo = 0;
	freeaddrinfo(res);
	return lo;
}
