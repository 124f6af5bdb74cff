/*
 * catalog/httpd/httpd_peer.c — who a client is: on a loopback address (the
 * replicator's --metrics loopback), on this host at all.
 *
 * A client that connects from one of this host's own addresses reaches us
 * through memory, not a link: there is no wire to save, and zstd's CPU
 * (about 1 GB/s a core on compressible chunks) is what the copy waits for.
 * The replicator's routes then frame its batches with lz4 when the codec
 * policy is auto (route_batch in replicator/serve/repl_routes.c). "This
 * host" is the network namespace the server runs in: a loopback address,
 * the address the client connected to, or any address an interface here
 * has.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "catalog/httpd/httpd_priv.h"

/* addr (4 or 16 bytes, IPv4-mapped already made IPv4) as found in sa, an
 * address of this host; 0 when sa is of another family or differs. */
static int same_addr(const struct sockaddr *sa, const uint8_t *addr,
		     unsigned len)
{
	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET && len == 4)
		return !memcmp(&((const struct sockaddr_in *)sa)->sin_addr,
			       addr, 4);
	if (sa->sa_family == AF_INET6) {
		const uint8_t *a =
		    ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;

		if (len == 16)
			return !memcmp(a, addr, 16);
		return IN6_IS_ADDR_V4MAPPED(
			   &((const struct sockaddr_in6 *)sa)->sin6_addr) &&
		       !memcmp(a + 12, addr, 4);
	}
	return 0;
}

int httpd_addr_loopback(const uint8_t *addr, unsigned len)
{
	static const uint8_t v6_loopback[16] = {[15] = 1};

	if (len == 4)
		return addr[0] == 127;
	return len == 16 && !memcmp(addr, v6_loopback, 16);
}

int httpd_addr_same_host(const uint8_t *addr, unsigned len,
			 const struct sockaddr *local)
{
	struct ifaddrs *ifs, *i;
	int found = 0;

	if (httpd_addr_loopback(addr, len))
		return 1;
	if (len != 4 && len != 16)
		return 0;
	if (same_addr(local, addr, len))
		return 1;
	if (getifaddrs(&ifs) < 0)
		return 0;
	for (i = ifs; i && !found; i = i->ifa_next)
		found = same_addr(i->ifa_addr, addr, len);
	freeifaddrs(ifs);
	return found;
}

const char *httpd_peer_str(const struct httpd_peer *p, char *buf, size_t cap)
{
	if (!p->addr_len || !inet_ntop(p->addr_len == 4 ? AF_INET : AF_INET6,
				       p->addr, buf, (socklen_t)cap))
		snprintf(buf, cap, "unknown");
	return buf;
}
