# tests/e2e/lib/nginx.sh — a real nginx (Debian's nginx-light) started by
# a test, as its child, on a loopback port, with everything (config,
# logs, temp and cache dirs) under $T/nginx.PORT.
#
#   start_nginx PORT 'server-block directives'   (sets NGINX_DIR)
#   start_nginx_http PORT 'http-block text'      (it has its own server
#                                                 listening on PORT)
#   stop_nginx_all                               (from e2e_after_cleanup)
#
# The access log, $NGINX_DIR/access.log, has one line per request:
#   METHOD URI STATUS BODY_BYTES CACHE_STATUS
# (CACHE_STATUS is "-" where no cache answered).
NGINX_PIDS=()

need_nginx() {
	NGINX=$(command -v nginx || echo /usr/sbin/nginx)
	[ -x "$NGINX" ] || skip "nginx missing (Debian package nginx-light)"
}

start_nginx() {
	start_nginx_http "$1" "server {
		listen 127.0.0.1:$1;
		$2
	}"
}

start_nginx_http() {
	local port=$1 body=$2 d="$T/nginx.$1" user="" i
	NGINX_DIR=$d
	mkdir -p "$d/tmp" "$d/cache"
	# As root, workers would run as nobody, who cannot enter $T (0700).
	[ "$(id -u)" = 0 ] && user="user root;"
	cat >"$d/nginx.conf" <<CONF
daemon off;
worker_processes 2;
$user
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections 1024; }
http {
	log_format ferry '\$request_method \$uri \$status \$body_bytes_sent \$upstream_cache_status';
	access_log $d/access.log ferry;
	client_body_temp_path $d/tmp/body;
	proxy_temp_path $d/tmp/proxy;
	fastcgi_temp_path $d/tmp/fastcgi;
	uwsgi_temp_path $d/tmp/uwsgi;
	scgi_temp_path $d/tmp/scgi;
	types { application/octet-stream bin; }
	default_type application/octet-stream;
	sendfile on;
	keepalive_requests 100000;
	$body
}
CONF
	"$NGINX" -t -p "$d" -c "$d/nginx.conf" -e "$d/error.log" >"$d/check.log" 2>&1 ||
		{ cat "$d/check.log"; die "nginx refused its test config"; }
	"$NGINX" -p "$d" -c "$d/nginx.conf" -e "$d/error.log" >>"$d/error.log" 2>&1 &
	NGINX_PIDS+=("$!")
	for i in $(seq 1 100); do
		curl -s -o /dev/null "http://127.0.0.1:$port/" && return 0
		sleep 0.1
	done
	cat "$d/error.log"
	die "nginx did not start on port $port"
}

stop_nginx_all() {
	local p
	for p in "${NGINX_PIDS[@]}"; do
		kill -QUIT "$p" 2>/dev/null
	done
	for p in "${NGINX_PIDS[@]}"; do
		wait "$p" 2>/dev/null
	done
	NGINX_PIDS=()
}
