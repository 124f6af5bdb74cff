# A regional HTTP cache in front of one ferry-replicator, for Varnish
# (Debian package varnish); the same role as ../nginx/ferry-cache.conf:
#
#   varnishd -a :8080 -f /etc/varnish/ferry.vcl -s file,/var/cache/varnish/ferry,500G
#   ferry-hydrator --cacheable http://CACHE:8080/v1/NS /mnt/ns
#
# Varnish collapses concurrent misses of one object by itself (request
# coalescing: the waiting list), and honours the replicator's
# Cache-Control: immutable answers are kept a year, HEAD (no-cache) and
# the 503s of a source still hashing (no-store) are not kept.
# tests/e2e/340-regional-cache.sh compiles this file with varnishd -C and
# runs it (the backend's port replaced).
vcl 4.1;

backend origin {
	.host = "127.0.0.1";
	.port = "8700";
	.first_byte_timeout = 120s;
	.between_bytes_timeout = 120s;
}

sub vcl_recv {
	if (req.method != "GET" && req.method != "HEAD") {
		return (pass);
	}
	# Immutable URLs: the path is the whole key; cookies mean nothing.
	unset req.http.Cookie;
	if (req.http.Authorization) {
		# Per-namespace tokens: answers are private to their client.
		return (pass);
	}
	return (hash);
}

sub vcl_hash {
	hash_data(req.url);
	return (lookup);
}

sub vcl_backend_response {
	# Packs and chunks stream to the first client while being stored.
	set beresp.do_stream = true;
	if (beresp.status != 200) {
		set beresp.uncacheable = true;
		set beresp.ttl = 0s;
	}
	return (deliver);
}

sub vcl_deliver {
	if (obj.hits > 0) {
		set resp.http.X-Cache-Status = "HIT";
	} else {
		set resp.http.X-Cache-Status = "MISS";
	}
}
