/*
 * catalog/cat_chunk_id.c — chunk ids: the SHA-256 of a chunk's raw bytes.
 *
 * Hashing goes through OpenSSL's EVP one-shot digest, which picks the
 * SHA-NI implementation on CPUs that have it. Hex is the form ids take in
 * URLs and file names (lowercase on output, either case on input).
 */
#include <errno.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "catalog/base/base.h"
#include "catalog/catalog.h"

int chunk_id_compute(const void *buf, size_t len, chunk_id *ret_id)
{
	unsigned int md_len = 0;

	if (!ret_id || (!buf && len))
		return -EINVAL;
	/* EVP_Digest is fine with a zero-length update, but not every
	 * OpenSSL release promises so for a NULL pointer: hash "" instead. */
	if (!buf)
		buf = "";
	if (EVP_Digest(buf, len, ret_id->b, &md_len, EVP_sha256(), NULL) != 1)
		return -EIO;
	if (md_len != CHUNK_ID_LEN)
		return -EIO;
	return 0;
}

int chunk_id_verify(const chunk_id *id, const void *buf, size_t len)
{
	chunk_id got;
	int r;

	if (!id)
		return -EINVAL;
	r = chunk_id_compute(buf, len, &got);
	if (r < 0)
		return r;
	/* The id comes from a catalog and the bytes from the wire; a
	 * constant-time compare costs nothing and leaks nothing. */
	return CRYPTO_memcmp(got.b, id->b, CHUNK_ID_LEN) == 0 ? 0 : -EBADMSG;
}

int chunk_id_from_hex(const char *hex, size_t len, chunk_id *ret_id)
{
	chunk_id id;

	if (!hex || !ret_id || len != CHUNK_ID_HEX_LEN)
		return -EINVAL;
	for (size_t i = 0; i < CHUNK_ID_LEN; i++) {
		int hi = base_hex_digit(hex[2 * i]);
		int lo = base_hex_digit(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -EINVAL;
		id.b[i] = (uint8_t)(hi << 4 | lo);
	}
	/* Only a fully valid id reaches the caller's struct. */
	*ret_id = id;
	return 0;
}

void chunk_id_to_hex(const chunk_id *id, char ret_hex[CHUNK_ID_HEX_LEN + 1])
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < CHUNK_ID_LEN; i++) {
		ret_hex[2 * i] = digits[id->b[i] >> 4];
		ret_hex[2 * i + 1] = digits[id->b[i] & 0x0f];
	}
	ret_hex[CHUNK_ID_HEX_LEN] = '\0';
}

int chunk_id_is_hole(const chunk_id *id)
{
	static const chunk_id zero;

	return memcmp(id->b, zero.b, CHUNK_ID_LEN) == 0;
}
