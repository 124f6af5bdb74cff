/*
 * fuzz_s3_auth.c — the S3 server's request decoding on arbitrary bytes:
 * percent-decoding of the path, the query's canonical form, and the
 * SigV4 check (hyd_s3_sigv4_check: Authorization header or presigned
 * query, credential scope, dates). The input is a request in lines:
 * PATH, QUERY, then "name:value" headers (names lower-cased by the
 * server before this). The verdict is the check's: only a request signed
 * with the one key below, dated 2013-05-24 (the "now" here), passes; the
 * corpus holds AWS's GET Object example (ok_) and near misses (bad_).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hydrator/s3/hyd_s3.h"
#include "tests/fuzz/fuzz_verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NOW 1369353600 /* 2013-05-24T00:00:00Z */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct hyd_s3_key key = {
	    "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"};
	const struct hyd_s3_keys keys = {(struct hyd_s3_key *)&key, 1};
	struct hyd_s3_req rq;
	struct base_buf b = {0};
	char *buf, *line, *save = NULL, *dec;
	const char *code = NULL;
	int status = 0, ok, n = 0;

	buf = malloc(size + 1);
	dec = malloc(size + 1);
	if (!buf || !dec)
		goto out;
	memcpy(buf, data, size);
	buf[size] = '\0';
	memset(&rq, 0, sizeof(rq));
	rq.method = "GET";
	rq.path = "";
	rq.query = "";
	for (line = strtok_r(buf, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save), n++) {
		char *colon;

		if (n == 0) {
			rq.path = line;
		} else if (n == 1) {
			rq.query = line[0] == '-' ? "" : line;
		} else if (rq.nhdr < HYD_S3_HDRS_MAX &&
			   (colon = strchr(line, ':')) != NULL) {
			*colon = '\0';
			rq.hdr[rq.nhdr].name = line;
			rq.hdr[rq.nhdr++].value = colon + 1;
		}
	}
	if (hyd_s3_uri_decode(rq.path, strlen(rq.path), dec, 0) == 0 &&
	    strlen(dec) > strlen(rq.path))
		abort(); /* decoding never lengthens */
	/* the canonical form of anything must not crash */
	hyd_s3_sigv4_canonical(&rq, "host;x-amz-date", "UNSIGNED-PAYLOAD", 0,
			       &b);
	base_buf_fini(&b);
	ok = hyd_s3_sigv4_check(&keys, &rq, NOW, &code, &status) == 0;
	if (!ok && (!code || (status != 400 && status != 403)))
		abort(); /* every refusal names an S3 code and a status */
	fuzz_report(ok);
out:
	free(buf);
	free(dec);
	return 0;
}
