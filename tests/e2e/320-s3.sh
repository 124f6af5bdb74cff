#!/usr/bin/env bash
# 320: ferry-hydrator --s3-listen (docs/s3.md) with real S3 clients: the
# AWS CLI, s3cmd and boto3 (Debian's awscli, s3cmd, python3-boto3; run
# from /usr/bin, not a pyenv's). Checks, in the order they run:
#  (c) --s3-listen on a non-loopback address without --s3-keys is exit 2,
#      nothing mounted;
#  (o) an object read over S3 first and then through the mount is fetched
#      from the replicator once (its chunks_served counter moves for the
#      S3 read only), and the bytes are the source's;
#  (l) aws s3api list-objects-v2: every key, prefix, delimiter
#      (CommonPrefixes), max-keys paging with continuation tokens, keys
#      with a space, a '+' and an '&';
#  (g) aws s3 cp to stdout and s3api get-object --range, byte-exact;
#      ETag and Last-Modified of head-object;
#  (s) s3cmd ls and get, byte-exact;
#  (b) boto3: a paginator over every key, get_object with Range (206,
#      Content-Range), head_object: the same ETag as the AWS CLI's;
#  (e) NoSuchKey 404 and a wrong secret's 403 SignatureDoesNotMatch in
#      each client; a PUT is 405; an unsigned request is 403;
#  (r) the ETag s3cmd shows is the same, and so is the one after a
#      remount on the same cache;
#  (u) a file name that is not UTF-8 is listed with the byte as the text
#      \xNN: the XML parses, s3cmd ls -r, aws s3 ls and boto3 list it.
. "$(dirname "$0")/lib/common.sh"
need_fuse
PY3=/usr/bin/python3
AWS=/usr/bin/aws
S3CMD=/usr/bin/s3cmd
[ -x "$AWS" ] || skip "awscli missing (Debian package; make deps)"
[ -x "$S3CMD" ] || skip "s3cmd missing (Debian package; make deps)"
"$PY3" -c 'import boto3' 2>/dev/null || skip "python3-boto3 missing (Debian package; make deps)"

"$PY3" - "$T/src" <<'EOF2'
import os, random, sys
r = random.Random(320)
root = sys.argv[1]
files = {
    "top.txt": b"hello s3\n",
    "empty": b"",
    "a/b/c.bin": r.randbytes(70000),
    "a/b/d/deep.txt": b"deep\n" * 100,
    "a/x y+z.txt": b"space plus\n",
    "a/k&v<1>.txt": b"xml\n",
    "big/blob.bin": r.randbytes((5 << 20) + 17),
    "big/other.bin": r.randbytes(3 << 20),
}
for i in range(25):
    files["many/f%02d" % i] = b"%d\n" % i
for k, v in files.items():
    p = os.path.join(root, k)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(v)
os.makedirs(os.path.join(root, "emptydir"), exist_ok=True)
# a known mtime for Last-Modified
os.utime(os.path.join(root, "top.txt"), (1700000000, 1700000000))
EOF2
port=$(free_port)
sport=$(free_port)
start_repl "$port" "s=$T/src"
URL="http://127.0.0.1:$port/v1/s"
wait_hashed "$port" s 60 || die "the replicator did not finish hashing"

AK=AKIDFERRYE2E
SK='wJalr/ferry+Secret/320'
printf '# e2e keys\n\n%s %s\nOTHERKEY othersecret\n' "$AK" "$SK" >"$T/keys"

# (c) anonymous access only on loopback
mkdir -p "$T/mnt"
MOUNTS+=("$T/mnt")
"$HYD" -f -c "$T/cache" --s3-listen "0.0.0.0:$sport" "$URL" "$T/mnt" 2>"$T/bad.err"
rc=$?
[ $rc = 2 ] || die "(c) --s3-listen 0.0.0.0 without --s3-keys: exit $rc, not 2"
grep -q 'loopback' "$T/bad.err" || die "(c) no line says why: $(cat "$T/bad.err")"
! mountpoint -q "$T/mnt" || die "(c) mounted anyway"
ok "(c) --s3-listen on 0.0.0.0 without --s3-keys is exit 2, nothing mounted"

mount_hyd "$URL" "$T/mnt" --no-backfill --s3-listen "127.0.0.1:$sport" --s3-keys "$T/keys"
EP="http://127.0.0.1:$sport"
export AWS_ACCESS_KEY_ID=$AK AWS_SECRET_ACCESS_KEY=$SK AWS_DEFAULT_REGION=us-east-1
export AWS_CONFIG_FILE="$T/aws.config" AWS_SHARED_CREDENTIALS_FILE=/dev/null
export AWS_EC2_METADATA_DISABLED=true AWS_PAGER=""
printf '[default]\nregion = us-east-1\ns3 =\n    addressing_style = path\n' >"$AWS_CONFIG_FILE"
aws() { "$AWS" --endpoint-url "$EP" "$@"; }

served() {
	curl -sf "http://127.0.0.1:$port/metrics" |
		awk '$1 == "ferry_replicator_chunks_served_total{namespace=\"s\"}" { print int($2) }'
}

# (o) S3 first, then the mount: one fetch
c0=$(served)
[ -n "$c0" ] || die "(o) no chunks_served counter on the replicator's /metrics"
aws s3 cp s3://s/big/blob.bin - >"$T/blob.s3" || die "(o) aws s3 cp failed"
cmp "$T/blob.s3" "$T/src/big/blob.bin" || die "(o) the bytes over S3 differ from the source"
c1=$(served)
[ "$c1" -gt "$c0" ] || die "(o) the S3 read fetched nothing ($c0 -> $c1)"
cmp "$T/mnt/big/blob.bin" "$T/src/big/blob.bin" || die "(o) the bytes through the mount differ"
c2=$(served)
[ "$c2" = "$c1" ] || die "(o) the mount fetched again after the S3 read: $c1 -> $c2 chunks served"
ok "(o) big/blob.bin: S3 read fetched $((c1 - c0)) chunks, the mount read after it fetched $((c2 - c1))"

# (l) listings
"$PY3" - "$T/src" >"$T/keys.want" <<'EOF2'
import os, sys
root = sys.argv[1]
ks = []
for d, _, fs in os.walk(root):
    for f in fs:
        ks.append(os.path.relpath(os.path.join(d, f), root))
print("\n".join(sorted(ks, key=lambda k: k.encode())))
EOF2
aws s3api list-objects-v2 --bucket s --output json >"$T/l.json" || die "(l) list-objects-v2 failed"
"$PY3" -c 'import json,sys; print("\n".join(o["Key"] for o in json.load(open(sys.argv[1]))["Contents"]))' \
	"$T/l.json" >"$T/keys.got"
diff "$T/keys.want" "$T/keys.got" || die "(l) list-objects-v2 keys differ from the tree"
aws s3api list-objects-v2 --no-paginate --bucket s --delimiter / --prefix a/ --output json >"$T/d.json" ||
	die "(l) list with delimiter failed"
got=$("$PY3" -c 'import json,sys; j=json.load(open(sys.argv[1]))
print(" ".join([o["Key"] for o in j.get("Contents",[])] + [p["Prefix"] for p in j.get("CommonPrefixes",[])]), j["KeyCount"])' "$T/d.json")
[ "$got" = "a/k&v<1>.txt a/x y+z.txt a/b/ 3" ] || die "(l) prefix a/ delimiter /: '$got'"
got=$("$PY3" -c 'import json,sys; j=json.load(open(sys.argv[1]))
print(" ".join(p["Prefix"] for p in j.get("CommonPrefixes",[])))' <(aws s3api list-objects-v2 --bucket s --delimiter / --output json))
[ "$got" = "a/ big/ emptydir/ many/" ] || die "(l) root CommonPrefixes: '$got'"
# paging by hand: max-keys 7 over many/ (25 keys) is 4 pages
tok="" pages=0
: >"$T/paged"
while :; do
	args=(--bucket s --prefix many/ --max-keys 7 --output json)
	[ -n "$tok" ] && args+=(--continuation-token "$tok")
	"$AWS" --endpoint-url "$EP" s3api list-objects-v2 "${args[@]}" --no-paginate >"$T/p.json" || die "(l) page $pages failed"
	pages=$((pages + 1))
	tok=$("$PY3" -c 'import json,sys; j=json.load(open(sys.argv[1]))
for o in j.get("Contents",[]): print(o["Key"], file=open(sys.argv[2],"a"))
assert j["KeyCount"] == len(j.get("Contents",[])) <= 7
print(j.get("NextContinuationToken","") if j["IsTruncated"] else "")' "$T/p.json" "$T/paged") || die "(l) bad page"
	[ -n "$tok" ] || break
	[ $pages -lt 10 ] || die "(l) paging does not end"
done
[ $pages = 4 ] || die "(l) 25 keys in pages of 7 took $pages pages"
grep '^many/' "$T/keys.want" | diff - "$T/paged" || die "(l) the pages do not hold every key once"
ok "(l) list-objects-v2: all $(wc -l <"$T/keys.want") keys, delimiter and CommonPrefixes, 25 keys in 4 pages of 7"

# (g) get, range, head
aws s3api get-object --bucket s --key a/b/c.bin --range bytes=100-1099 "$T/r.out" >"$T/r.json" ||
	die "(g) get-object --range failed"
cmp "$T/r.out" <(tail -c +101 "$T/src/a/b/c.bin" | head -c 1000) || die "(g) the range's bytes differ"
grep -q '"ContentRange": "bytes 100-1099/70000"' "$T/r.json" || die "(g) no Content-Range: $(cat "$T/r.json")"
aws s3 cp "s3://s/a/x y+z.txt" - | cmp - "$T/src/a/x y+z.txt" || die "(g) 'a/x y+z.txt' differs"
aws s3 cp "s3://s/empty" - | cmp - "$T/src/empty" || die "(g) the empty object differs"
aws s3api head-object --bucket s --key top.txt --output json >"$T/h.json" || die "(g) head-object failed"
etag_cli=$("$PY3" -c 'import json,sys; print(json.load(open(sys.argv[1]))["ETag"])' "$T/h.json")
lm=$("$PY3" -c 'import json,sys; print(json.load(open(sys.argv[1]))["LastModified"])' "$T/h.json")
case "$lm" in *"14 Nov 2023 22:13:20"* | 2023-11-14T22:13:20*) ;; *) die "(g) Last-Modified of top.txt is '$lm', not 2023-11-14 22:13:20 UTC" ;; esac
echo "$etag_cli" | grep -Eq '^"[0-9a-f]{32}-[0-9]+"$' || die "(g) ETag '$etag_cli' is not \"<32 hex>-N\""
ok "(g) get-object --range 100-1099 exact with Content-Range, cp of odd names, ETag $etag_cli, Last-Modified $lm"

# (s) s3cmd
cat >"$T/s3cfg" <<EOF2
[default]
access_key = $AK
secret_key = $SK
host_base = 127.0.0.1:$sport
host_bucket = 127.0.0.1:$sport
use_https = False
signature_v2 = False
bucket_location = us-east-1
EOF2
"$S3CMD" -c "$T/s3cfg" ls s3://s/a/ >"$T/s3cmd.ls" 2>&1 || { cat "$T/s3cmd.ls" >&2; die "(s) s3cmd ls failed"; }
grep -q 's3://s/a/b/' "$T/s3cmd.ls" && grep -q 's3://s/a/x y+z.txt' "$T/s3cmd.ls" ||
	{ cat "$T/s3cmd.ls" >&2; die "(s) s3cmd ls s3://s/a/ lacks a/b/ or 'a/x y+z.txt'"; }
"$S3CMD" -c "$T/s3cfg" get --force s3://s/big/other.bin "$T/other.s3cmd" >"$T/s3cmd.get" 2>&1 ||
	{ cat "$T/s3cmd.get" >&2; die "(s) s3cmd get failed"; }
cmp "$T/other.s3cmd" "$T/src/big/other.bin" || die "(s) s3cmd get: bytes differ"
ok "(s) s3cmd ls and get (3 MiB) exact"

# (b) boto3
cat >"$T/b.py" <<'EOF2'
import sys, boto3, botocore
from botocore.config import Config
ep, ak, sk, src, want = sys.argv[1:6]
def client(secret):
    return boto3.client("s3", endpoint_url=ep, aws_access_key_id=ak,
        aws_secret_access_key=secret, region_name="us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
c = client(sk)
keys = []
for page in c.get_paginator("list_objects_v2").paginate(Bucket="s", PaginationConfig={"PageSize": 4}):
    assert page["KeyCount"] <= 4, page["KeyCount"]
    keys += [o["Key"] for o in page.get("Contents", [])]
assert keys == open(want).read().splitlines(), keys
data = open(src + "/big/blob.bin", "rb").read()
r = c.get_object(Bucket="s", Key="big/blob.bin", Range="bytes=1048570-2097160")
assert r["ResponseMetadata"]["HTTPStatusCode"] == 206
assert r["ContentRange"] == "bytes 1048570-2097160/%d" % len(data), r["ContentRange"]
assert r["Body"].read() == data[1048570:2097161]
r = c.get_object(Bucket="s", Key="big/blob.bin", Range="bytes=-10")
assert r["Body"].read() == data[-10:]
assert c.get_object(Bucket="s", Key="big/blob.bin")["Body"].read() == data
h = c.head_object(Bucket="s", Key="top.txt")
print(h["ETag"], h["ContentLength"], h["ContentType"], h["LastModified"].timestamp())
for key, code, st in (("nope/none", "NoSuchKey", 404), ("a/b", "NoSuchKey", 404)):
    try:
        c.get_object(Bucket="s", Key=key)
        raise SystemExit("no error for " + key)
    except botocore.exceptions.ClientError as e:
        assert e.response["Error"]["Code"] == code and e.response["ResponseMetadata"]["HTTPStatusCode"] == st, e.response
try:
    c.get_object(Bucket="s", Key="top.txt", Range="bytes=100-200")
    raise SystemExit("no error for an unsatisfiable range")
except botocore.exceptions.ClientError as e:
    assert e.response["Error"]["Code"] == "InvalidRange", e.response
try:
    client(sk + "x").list_objects_v2(Bucket="s")
    raise SystemExit("a wrong secret listed")
except botocore.exceptions.ClientError as e:
    assert e.response["Error"]["Code"] == "SignatureDoesNotMatch" and e.response["ResponseMetadata"]["HTTPStatusCode"] == 403, e.response
try:
    c.head_bucket(Bucket="other")
    raise SystemExit("head_bucket other")
except botocore.exceptions.ClientError as e:
    assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 404
c.head_bucket(Bucket="s")
assert [b["Name"] for b in c.list_buckets()["Buckets"]] == ["s"]
url = c.generate_presigned_url("get_object", Params={"Bucket": "s", "Key": "a/b/d/deep.txt"}, ExpiresIn=60)
print(url)
EOF2
"$PY3" "$T/b.py" "$EP" "$AK" "$SK" "$T/src" "$T/keys.want" >"$T/b.out" || die "(b) the boto3 checks failed"
read -r etag_b3 len_b3 ctype_b3 ts_b3 <"$T/b.out"
[ "$etag_b3" = "$etag_cli" ] || die "(b) boto3's ETag $etag_b3, the AWS CLI's $etag_cli"
[ "$len_b3" = 9 ] && [ "$ctype_b3" = application/octet-stream ] && [ "$ts_b3" = 1700000000.0 ] ||
	die "(b) head_object top.txt: length $len_b3, type $ctype_b3, mtime $ts_b3"
curl -sf "$(sed -n 2p "$T/b.out")" | cmp - "$T/src/a/b/d/deep.txt" || die "(b) the presigned URL does not serve the object"
ok "(b) boto3: paginator (pages of 4) over every key, Range 206 exact, suffix range, head_object, presigned URL; ETag = the CLI's"

# (e) errors in each client
hc() { curl -s -o "$T/err.xml" -w '%{http_code}' "$@"; }
AWS_SECRET_ACCESS_KEY=wrong "$AWS" --endpoint-url "$EP" s3api head-object --bucket s --key top.txt 2>"$T/e1" &&
	die "(e) a wrong secret: head-object succeeded"
grep -q '403' "$T/e1" || die "(e) aws with a wrong secret: $(cat "$T/e1")"
AWS_SECRET_ACCESS_KEY=wrong "$AWS" --endpoint-url "$EP" s3api list-objects-v2 --bucket s 2>"$T/e2" >/dev/null &&
	die "(e) a wrong secret: list succeeded"
grep -q 'SignatureDoesNotMatch' "$T/e2" || die "(e) aws list with a wrong secret: $(cat "$T/e2")"
aws s3api get-object --bucket s --key no/such "$T/x" 2>"$T/e3" && die "(e) get-object of a missing key succeeded"
grep -q 'NoSuchKey' "$T/e3" || die "(e) aws get of a missing key: $(cat "$T/e3")"
sed "s|^secret_key = .*|secret_key = wrong|" "$T/s3cfg" >"$T/s3cfg.bad"
"$S3CMD" -c "$T/s3cfg.bad" ls s3://s/ >"$T/e4" 2>&1 && die "(e) s3cmd with a wrong secret listed"
grep -q 'SignatureDoesNotMatch\|403' "$T/e4" || die "(e) s3cmd wrong secret: $(cat "$T/e4")"
"$S3CMD" -c "$T/s3cfg" get s3://s/no/such "$T/x2" >"$T/e5" 2>&1 && die "(e) s3cmd get of a missing key succeeded"
grep -q '404\|NoSuchKey\|does not exist' "$T/e5" || die "(e) s3cmd get missing: $(cat "$T/e5")"
[ "$(hc "$EP/s/top.txt")" = 403 ] || die "(e) an unsigned GET is not 403"
grep -q '<Code>AccessDenied</Code>' "$T/err.xml" && grep -q '<RequestId>' "$T/err.xml" ||
	die "(e) not an S3 error body: $(cat "$T/err.xml")"
[ "$(hc -X PUT --data x "$EP/s/new")" = 405 ] || die "(e) PUT is not 405"
grep -q '<Code>MethodNotAllowed</Code>' "$T/err.xml" || die "(e) PUT: $(cat "$T/err.xml")"
ok "(e) wrong secret 403 SignatureDoesNotMatch (aws, s3cmd, boto3), NoSuchKey 404 (aws, s3cmd, boto3), unsigned 403 AccessDenied, PUT 405"

# (r) the ETag is the content's: the same from s3cmd, and after a remount
"$S3CMD" -c "$T/s3cfg" info s3://s/top.txt >"$T/info" 2>&1 || { cat "$T/info" >&2; die "(r) s3cmd info failed"; }
grep -q "${etag_cli//\"/}" "$T/info" || { cat "$T/info" >&2; die "(r) s3cmd info does not show ETag $etag_cli"; }
umount_hyd "$T/mnt"
mount_hyd "$URL" "$T/mnt" --no-backfill --s3-listen "127.0.0.1:$sport" --s3-keys "$T/keys"
etag2=$(aws s3api head-object --bucket s --key top.txt --query ETag --output text) || die "(r) head-object after the remount failed"
[ "$etag2" = "$etag_cli" ] || die "(r) ETag after a remount: $etag2, before: $etag_cli"
ok "(r) ETag $etag_cli: the same in s3cmd info and after a remount"

umount_hyd "$T/mnt"

# (u) a file name that is not UTF-8: a listing without encoding-type=url
# shows each such byte as the text \xNN (docs/s3.md), so the XML stays
# well-formed for every client; with encoding-type=url the bytes travel
# percent-encoded as they are. The source gets the names now: the
# replicator walks it again at start (a new generation) and the mount
# serves that.
stop_repl
mkdir -p "$T/src/odd"
"$PY3" -c 'import sys; open(sys.argv[1].encode() + b"/caf\xe9.txt", "wb").write(b"latin-1\n")
open(sys.argv[1].encode() + b"/ok-\xc3\xa9t\xc3\xa9.txt", "wb").write(b"utf-8\n")' "$T/src/odd" ||
	die "(u) cannot make the odd names"
start_repl "$port" "s=$T/src"
wait_hashed "$port" s 60 || die "(u) the replicator did not finish hashing"
mount_hyd "$URL" "$T/mnt" --no-backfill --s3-listen "127.0.0.1:$sport" --s3-keys "$T/keys"
# the raw XML, signed by curl, parsed by python's expat (what s3cmd uses)
curl -sf --aws-sigv4 "aws:amz:us-east-1:s3" -u "$AK:$SK" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
	"$EP/s?list-type=2&prefix=odd%2F" >"$T/odd.xml" ||
	die "(u) the listing of odd/ failed"
"$PY3" - "$T/odd.xml" <<'EOF2' || { cat "$T/odd.xml" >&2; die "(u) the listing is not the XML it should be"; }
import sys, xml.etree.ElementTree as ET
ns = {"s": "http://s3.amazonaws.com/doc/2006-03-01/"}
keys = [k.text for k in ET.parse(sys.argv[1]).getroot().findall("s:Contents/s:Key", ns)]
assert keys == ["odd/caf\\xe9.txt", "odd/ok-\u00e9t\u00e9.txt"], keys
EOF2
"$S3CMD" -c "$T/s3cfg" ls -r s3://s/ >"$T/s3cmd.lsr" 2>&1 || { cat "$T/s3cmd.lsr" >&2; die "(u) s3cmd ls -r failed"; }
grep -qF 's3://s/odd/caf\xe9.txt' "$T/s3cmd.lsr" && grep -qF "s3://s/odd/ok-$(printf '\xc3\xa9t\xc3\xa9').txt" "$T/s3cmd.lsr" ||
	{ cat "$T/s3cmd.lsr" >&2; die "(u) s3cmd ls -r does not list the odd names"; }
grep -q 's3://s/big/blob.bin' "$T/s3cmd.lsr" || { cat "$T/s3cmd.lsr" >&2; die "(u) s3cmd ls -r stopped short"; }
aws s3 ls --recursive s3://s/odd/ >"$T/aws.ls" 2>&1 || { cat "$T/aws.ls" >&2; die "(u) aws s3 ls --recursive failed"; }
[ "$(wc -l <"$T/aws.ls")" = 2 ] || { cat "$T/aws.ls" >&2; die "(u) aws s3 ls does not list both odd names"; }
"$PY3" - "$EP" "$AK" "$SK" <<'EOF2' || die "(u) boto3 cannot list the odd names"
import sys, boto3
from botocore.config import Config
c = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id=sys.argv[2],
    aws_secret_access_key=sys.argv[3], region_name="us-east-1",
    config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
keys = [o["Key"] for o in c.list_objects_v2(Bucket="s", Prefix="odd/")["Contents"]]
assert len(keys) == 2 and keys[1] == "odd/ok-\u00e9t\u00e9.txt", keys
assert c.get_object(Bucket="s", Key=keys[1])["Body"].read() == b"utf-8\n"
EOF2
ok "(u) a name that is not UTF-8: listed as odd/caf\\xe9.txt (well-formed XML), s3cmd ls -r, aws s3 ls and boto3 list it without error"

umount_hyd "$T/mnt"
stop_repl
