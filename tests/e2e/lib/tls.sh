# tests/e2e/lib/tls.sh — what the https scripts share: certificates made
# with the openssl CLI, a counting TCP relay between client and server,
# and https versions of common.sh's stats helpers. Sourced after
# common.sh (and wait.sh).

command -v openssl >/dev/null || skip "openssl CLI missing (Debian package openssl): cannot make test certificates"

# mk_pki DIR — in DIR (EC P-256 keys, PEM):
#   ca.pem/ca.key       the CA the tests trust ("ferry e2e CA")
#   other-ca.pem        a CA nobody signed the server with
#   srv.pem/srv.key     server certificate "ferry srv 1" for 127.0.0.1
#                       and localhost, signed by ca, valid 30 days
#   srv2.pem/srv2.key   the same as "ferry srv 2" (a reload's new one)
#   expired.pem/.key    the same as "ferry srv expired", valid in
#                       January 2020 only
#   cli.pem/cli.key     client certificate "ferry client", signed by ca
#   stranger.pem/.key   client certificate signed by other-ca
mk_pki() {
	local d=$1 n
	mkdir -p "$d/db" || return 1
	(
		cd "$d" || exit 1
		set -e
		key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
		key ca.key
		openssl req -x509 -new -key ca.key -out ca.pem -days 30 -subj "/CN=ferry e2e CA" 2>/dev/null
		key other-ca.key
		openssl req -x509 -new -key other-ca.key -out other-ca.pem -days 30 -subj "/CN=other CA" 2>/dev/null
		printf 'basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n' >leaf.ext
		# leaf NAME CN CA
		leaf() {
			key "$1.key"
			openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
			openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial \
				-days 30 -extfile leaf.ext -out "$1.pem" 2>/dev/null
		}
		leaf srv "ferry srv 1" ca
		leaf srv2 "ferry srv 2" ca
		leaf cli "ferry client" ca
		leaf stranger "stranger" other-ca
		# Backdated: x509 -req cannot, "openssl ca" can.
		: >db/index.txt
		echo 1000 >db/serial
		cat >ca.cnf <<-'EOF'
			[ ca ]
			default_ca = d
			[ d ]
			database = db/index.txt
			new_certs_dir = db
			serial = db/serial
			default_md = sha256
			policy = p
			unique_subject = no
			[ p ]
			commonName = supplied
			[ leaf ]
			basicConstraints = CA:FALSE
			subjectAltName = IP:127.0.0.1,DNS:localhost
		EOF
		key expired.key
		openssl req -new -key expired.key -out expired.csr -subj "/CN=ferry srv expired" 2>/dev/null
		openssl ca -batch -config ca.cnf -cert ca.pem -keyfile ca.key -in expired.csr -out expired.pem \
			-startdate 20200101000000Z -enddate 20200201000000Z -extensions leaf -notext 2>/dev/null
	) || return 1
	for n in ca other-ca srv srv2 cli stranger expired; do
		[ -s "$d/$n.pem" ] || return 1
	done
}

# cert_cn FILE — the subject's CN of a PEM certificate (on stdin with -).
cert_cn() {
	openssl x509 -noout -subject -nameopt multiline ${1:+-in "$1"} 2>/dev/null |
		sed -n 's/^ *commonName *= *//p'
}

# served_cn PORT CAFILE — the CN of the certificate a new TLS connection
# to 127.0.0.1:PORT is shown (openssl s_client), verified against CAFILE.
served_cn() {
	openssl s_client -connect "127.0.0.1:$1" -CAfile "$2" -verify_return_error \
		</dev/null 2>/dev/null | cert_cn
}

# start_relay PORT TO_PORT PREFIX — a TCP relay on 127.0.0.1:PORT to
# 127.0.0.1:TO_PORT that appends every byte it carries to PREFIX.up
# (client to server) and PREFIX.down (server to client); sets RELAY_PID.
start_relay() {
	rm -f "$3.up" "$3.down" "$3.ready"
	python3 - "$1" "$2" "$3" <<'PY' &
import socket, sys, threading
port, to, prefix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", port))
ls.listen(64)
files = {d: open(prefix + "." + d, "ab", buffering=0) for d in ("up", "down")}
lock = threading.Lock()

def pump(a, b, d):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            with lock:
                files[d].write(data)
            b.sendall(data)
    except OSError:
        pass
    finally:
        try:
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass

def serve(c):
    try:
        u = socket.create_connection(("127.0.0.1", to))
    except OSError:
        c.close()
        return
    ts = [threading.Thread(target=pump, args=(c, u, "up"), daemon=True),
          threading.Thread(target=pump, args=(u, c, "down"), daemon=True)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    c.close()
    u.close()

open(prefix + ".ready", "w").close()
while True:
    c, _ = ls.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
	RELAY_PID=$!
	wait_for 30 test -e "$3.ready" || die "the relay did not start"
}

# stop_relay — end the relay started last (it only ends by a signal).
stop_relay() {
	[ -n "${RELAY_PID:-}" ] || return 0
	kill "$RELAY_PID" 2>/dev/null
	wait "$RELAY_PID" 2>/dev/null
	RELAY_PID=""
}

# has_bytes FILE SAMPLEFILE OFFSET LEN — 0 when the LEN bytes at OFFSET
# of SAMPLEFILE occur anywhere in FILE.
has_bytes() {
	python3 - "$@" <<'PY'
import sys
hay = open(sys.argv[1], "rb").read()
with open(sys.argv[2], "rb") as f:
    f.seek(int(sys.argv[3]))
    needle = f.read(int(sys.argv[4]))
assert len(needle) == int(sys.argv[4])
sys.exit(0 if needle in hay else 1)
PY
}

# stored_chunks CACHEDIR — chunks in a cache's store (0 when it has none).
stored_chunks() {
	sqlite3 "$1/state.db" "select count(*) from chunk" 2>/dev/null || echo 0
}

# catalogs_in CACHEDIR — catalog files the cache holds.
catalogs_in() {
	find "$1/catalogs" -name '*.db' 2>/dev/null | wc -l
}
