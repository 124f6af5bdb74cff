/*
 * catalog/cat_chunker.c — the FastCDC content-defined chunker.
 *
 * Both sites must cut every file at the same places, forever: the cut
 * points decide the chunk ids in a catalog, and dedup across generations
 * only works if an unchanged region is cut the same way again. So the
 * algorithm and the gear table below are part of the catalog format
 * (meta chunk_min/avg/max name the parameters; this file fixes the rest).
 * Changing either means a new catalog format string.
 *
 * Algorithm (Xia et al., "FastCDC", USENIX ATC 2016), normalized chunking
 * level 2:
 *   - the first min bytes are skipped (no cut can land there anyway);
 *   - a gear hash h = (h << 1) + G[byte] rolls over the rest, starting at 0
 *     at offset min;
 *   - from min up to avg a cut needs log2(avg) + 2 hash bits to be zero
 *     (harder than average), from avg up to max it needs log2(avg) - 2
 *     (easier), which pulls chunk sizes toward avg;
 *   - a cut is forced at max.
 * A cut after byte i makes a chunk of i + 1 bytes (the byte that completed
 * the match belongs to the chunk that ends with it).
 *
 * The mask bits are the TOP bits of h. After the shift a byte's gear value
 * has moved up one bit per following byte, so bit k of h depends on the last
 * k + 1 bytes: the top bits see a 64-byte window, the low bits only a few
 * bytes. (The paper spreads its mask bits for the same reason.)
 */
#include <errno.h>

#include "catalog/catalog.h"

/*
 * The gear table: G[i] is the i-th output of splitmix64 (Steele, Lea,
 * Flood 2014; the reference code at prng.di.unimi.it/splitmix64.c) seeded
 * with state = 0x6665727279676561 ("ferrygea" in ASCII):
 *
 *   state += 0x9e3779b97f4a7c15;
 *   z = state;
 *   z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
 *   z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
 *   G[i] = z ^ (z >> 31);
 *
 * for i = 0..255 in order. Never edit by hand: regenerate with that loop and
 * check it against the golden cut points in tests/unit/test_chunker.c.
 */
static const uint64_t gear[256] = {
    0x54677b32eddcd2e2ull, 0x3084251930c39c85ull, 0x3eeaac789a0cb739ull,
    0xaa26cd19f2268cfeull, 0x0f6e34cc7695d162ull, 0x4f768cf3b4ef8a92ull,
    0x08b3e757f266862eull, 0x3133930d47a201c1ull, 0xbbbf695f44ec5833ull,
    0x6524aa4449b6887dull, 0x72a1c93ad3b122d9ull, 0x064bd4bfab71d9ddull,
    0x83e468fed3d4ac8cull, 0x194d50a6da0b84a4ull, 0x3067a07e4a281cb2ull,
    0x99cc5280539ff3abull, 0xc565a3efa97ef591ull, 0xfb45c61fbb021e84ull,
    0xae3414758aac6988ull, 0xc83c26c5b5e170bbull, 0x5b48039e21bf69e2ull,
    0x40514c24d05dde26ull, 0xa787392eb6b8a05aull, 0x96362df7024258d2ull,
    0x45b771ed421d245dull, 0x99efe2e2c918aa9cull, 0xb7b519dbb077b501ull,
    0x708833a481a86031ull, 0xf24e5554f70638bbull, 0x0341c592207dc24dull,
    0x3293850b91aeef71ull, 0xdd93e9d6fe6ac6edull, 0xb96da61ba566634aull,
    0x865d641baa6891a0ull, 0x36669366b6d567f8ull, 0xe418097d08046946ull,
    0x913900eabfc12b99ull, 0xc18470dfdacb79deull, 0x0ebdf35219397ca1ull,
    0x2991eafdc4581b56ull, 0x4c41261f8e97adabull, 0x36791ab3ac3ca203ull,
    0x95a0420ff12c7802ull, 0x68c73f26281fac28ull, 0x99232b66e072299aull,
    0xd5f26371d4dfd334ull, 0x8aa1719839d9612full, 0x4409453172f066f5ull,
    0x106cffe697e361adull, 0xd44b599f9ec09b48ull, 0xd20e0f8893191ec6ull,
    0xca830879c4170c5aull, 0x5d698b1410b021baull, 0xf24811ddacfd746aull,
    0x2521dc20b4b5be1dull, 0x8fe76150dc255c21ull, 0x53914f7ebf56eb23ull,
    0x34df4f9c820aca4eull, 0x5f3a21f485702f79ull, 0x33aff982aeaabc4eull,
    0x3abe3a8d694d80b0ull, 0x74fc95d0dd4b87c8ull, 0x908c47db3f5e611full,
    0x5e6ae199cc669651ull, 0x79717113f5aa619cull, 0x2cce72f70583089dull,
    0x01ce88638b606fa8ull, 0xea8f98a7aad087f1ull, 0xa200b5b3783138e5ull,
    0x36999d81f14c8138ull, 0x49552431bc91fb5bull, 0x4823142053143230ull,
    0x6de49388062ccafdull, 0x6fe1920c19c4d41bull, 0x9bbf20ae9652dd0dull,
    0xc7951cc0d6294772ull, 0x48e01b84b3894d54ull, 0x0aad7fdaafc46764ull,
    0xf834a8b7085f6323ull, 0xa6e855870e8759e8ull, 0x7259dea8850011c7ull,
    0xbe28119e386948c1ull, 0x7654ce72fda242b5ull, 0xff8e5e378e4676a9ull,
    0xb41a53a835c3f0e2ull, 0x61e1871d8709ed9cull, 0x586e9ee5ba2d44d3ull,
    0x39274b7077981b51ull, 0xa4e92b8ae04f2b50ull, 0x7862df165293cc3eull,
    0x852d915aacbf8fbfull, 0xdc6501567d31877full, 0x7f1d157da6426b38ull,
    0x24413d66d6c736c1ull, 0x8712d9b0107638c6ull, 0x484e138bbf6c7312ull,
    0x2d7bf2a92a620a79ull, 0x87ba29f3d18b1ed9ull, 0x41ae490aa9d84e36ull,
    0x21730fd93f62b6a8ull, 0x7fb85356d06bc040ull, 0xff6de94880011ef8ull,
    0x6cb3c19cc5169b39ull, 0xf376f2ba80fb5c8bull, 0xa08734855e3a536aull,
    0xe5deb1bf9949498eull, 0x623d7af7ce72e942ull, 0xb4915c900f0b438full,
    0x59fce164d904614dull, 0xca4aea7c1354cd0full, 0x1a4a5a2065eb0269ull,
    0x40417ac0a6ea63daull, 0x121974cd135b3325ull, 0x859a4d86c23b11f3ull,
    0xb979ada4bdf10b84ull, 0x97e54caa9a41a5d6ull, 0x2337060b47ad1251ull,
    0x053ffd70d4fc06c9ull, 0x5ff101a334471cd1ull, 0x575b897f242f3e3aull,
    0x193e6104014e8247ull, 0x035129bb1c0d3204ull, 0x38ebf38a9326bd0aull,
    0xf6cc88715de1e064ull, 0x0e918ebe4ac44bbfull, 0xcd2e3a485c358ce1ull,
    0xb5ce39b93c60b8a0ull, 0x4e1524e51276f449ull, 0x8de74f27491f577full,
    0xb65b27e5af875d0aull, 0x6f9eb15cf63d7a8bull, 0x0d2d260b9561c2d5ull,
    0x346f0734b889de80ull, 0xaaf591151225c76cull, 0xf88217d68783ec5aull,
    0x8942a357de607609ull, 0x0be4488906b7ffc2ull, 0x2f2354ca9ab1b41full,
    0x847ee57272196b24ull, 0x35afca19da204ef3ull, 0x7811f63c540eb847ull,
    0x2e57ea4e3a471504ull, 0x01b6d4f93230d564ull, 0x2af4f9f136c7f90bull,
    0xf1898d7b9e58fcf5ull, 0xfba01a07f0007502ull, 0x02d3b5a23ee57af1ull,
    0xdc5024913cffd5eeull, 0x7e2c6ed693022bb5ull, 0x43096f61a0352149ull,
    0xe7c1cc0e89beffd4ull, 0x6bce2514c1688b58ull, 0xadcf31bbf46ebf0aull,
    0x984f0c3240ccb050ull, 0x02964b0f59308e03ull, 0xb49d333b5f9e279dull,
    0x5d9dac5a3c338d2full, 0x150c0e628e9c87f3ull, 0x2e516947ae8d837eull,
    0x4ecd0eaa2b18ca99ull, 0xd3c2920b864304a5ull, 0x914423071da00ca1ull,
    0x9da114541bce423cull, 0xfde39ba80c186c30ull, 0x31f411819bd0625bull,
    0x9bd22658a06728b2ull, 0xf786f6052b7934a6ull, 0x9f162ed0551673faull,
    0x0b2c1f72f6b91037ull, 0xb36600c5226f5e16ull, 0x1be1f6d57d47895eull,
    0x20fa873192b9f2daull, 0x9be2355d6004170eull, 0x3d588a87d3073d2bull,
    0xebcce4a8611a6d5full, 0xbd0e8165e4985485ull, 0x563b54617dbf3f6aull,
    0x68aeee8432fccc45ull, 0x209211c9fec422c4ull, 0xd4032eaa73cdca22ull,
    0xa6976021de8405fbull, 0xa1ff6f9eefb82071ull, 0xf5feaf366b2e14f7ull,
    0xbf48ac945fa496fcull, 0x30f8a01fbc2766faull, 0xde9f4cd70c7d9cddull,
    0xef8ac98eeb2f8bddull, 0xbe41672569d66e38ull, 0x45fa532a8f098069ull,
    0x2f62f8e25b532902ull, 0x5b14b9046d07f268ull, 0xa8c712556c4452f7ull,
    0x6b1aec0855a09e6cull, 0xe748e640e7e899aeull, 0x772d37bfc6184d9aull,
    0x18e924cf7b4d14a2ull, 0x3e473b4e9c7f4c64ull, 0x3bd40232a70018f6ull,
    0x157967d98dd3f75cull, 0x162c4c225402344aull, 0x38050843a49b771bull,
    0xa674bd5a438eae5cull, 0x3f6d75b6e5ff70c0ull, 0x5356b987c9ba1587ull,
    0x03f6e8900b92108eull, 0xd8ee0680ce09176eull, 0xa2ba2b4298b17da4ull,
    0x148da589e9fe9e9eull, 0x0cdd8155dfda949bull, 0xff150fd22726393eull,
    0x54edd5e07f1fc441ull, 0xa1c62374393e1dcaull, 0x45ef2cc65f70856bull,
    0x23d474625b022e1bull, 0x210312475d0a981cull, 0x05f73c50ceff319aull,
    0x8a414e25054bbb78ull, 0xa76b646324a9074eull, 0x526e893f4eeb0b35ull,
    0x06776cd0121285baull, 0xd0e4641645645101ull, 0x3149ad6f3dd2cf30ull,
    0x36ecf8d798353135ull, 0x915d1e2c2ed60fc1ull, 0x075637623e042faaull,
    0x5f753d50d875561cull, 0x1a29b99d3258b494ull, 0x4ca01bee71d852ffull,
    0x22aa4d6cef476eb3ull, 0x60de60f8e7290d95ull, 0xb3a646f123cbb770ull,
    0x71440636f2a67a7eull, 0x0b1c7832b79528a3ull, 0x9f87f3a6aaaffaf5ull,
    0xd145902184a05f75ull, 0xd5ce14e57d769763ull, 0x37d5e1fcdce6c1e7ull,
    0x63f92e21805555ebull, 0x2d352ea71f3d974aull, 0xdd8af164cdc34f36ull,
    0x722ea8619522953full, 0xb0024fc539107c60ull, 0x50f2bba3c96edfa0ull,
    0xdfa57f49f718cc9full, 0x90401e67576dfb73ull, 0x66464ada1ac70326ull,
    0xebd936dcd59fed88ull, 0x6653dee9ce3344bdull, 0x850281a4096e6fecull,
    0x256988fca35669f8ull, 0xc7fdd49eb21cf5eaull, 0x447f3406599a10bdull,
    0x5df948c4ba9282faull, 0xcb42a85fe8a18172ull, 0xfb62569468784339ull,
    0xcc7cae84d3c891b2ull,
};

void chunk_params_default(chunk_params *ret)
{
	ret->min = CHUNK_MIN_DEFAULT;
	ret->avg = CHUNK_AVG_DEFAULT;
	ret->max = CHUNK_MAX_DEFAULT;
}

int chunk_params_check(const chunk_params *p)
{
	if (!p)
		return -EINVAL;
	if (p->min < 64 || p->min >= p->avg || p->avg >= p->max ||
	    p->max > CHUNK_MAX_LIMIT)
		return -EINVAL;
	/* avg > min >= 64, so avg is never 0 here. */
	if (p->avg & (p->avg - 1))
		return -EINVAL;
	return 0;
}

/*
 * How the scan below finds exactly the cuts of the plain loop, faster.
 *
 * The plain loop (h = (h << 1) + gear[b], test, next byte) is one serial
 * chain of two dependent adds per byte, so it runs at the latency of that
 * chain (~2 cycles per byte here) while the core could do twice that work.
 * Two facts let us break the chain without changing a single cut:
 *
 *   1. A mask of the top k bits is zero iff h < 2^(64 - k): one compare
 *      and branch per byte instead of and + test.
 *   2. The hash forgets: a byte's gear value is shifted left once per later
 *      byte, so after 64 more bytes it has left the 64-bit word. The hash
 *      after byte i is therefore a function of bytes i-63..i alone (of
 *      min..i while i < min + 63, since h starts at 0 at min).
 *
 * So a stripe of 4 * seg bytes is hashed as 4 independent lanes of seg
 * bytes each, interleaved in one loop. Lane 0 continues the real hash;
 * lanes 1..3 start 64 bytes before their segment with h = 0 (bytes that
 * belong to the previous lane and lie at or after min), which by (2) gives
 * each of them the exact hash from its first byte on. When any lane
 * matches at step j, the lanes before it have not matched up to j; they
 * are finished one by one in order, and the first match in position order
 * is the cut, the same one the plain loop returns. After a stripe without
 * a match, lane 3 holds the exact hash of the stripe's last byte, which
 * the next stripe's lane 0 continues.
 *
 * seg is capped so that the work hashed past a cut (up to 3 lanes) and
 * the 3 * 64 warm-up bytes per stripe both stay a few percent of a chunk.
 */
#define GEAR_LANES 4
#define GEAR_FORGET 64	   /* bytes after which a hash forgets its start */
#define GEAR_SEG_MAX 2048u /* bytes per lane per stripe */

/*
 * Roll the hash *hp over buf[i..end) one byte at a time and return one
 * past the first position whose hash is below lim, or 0 when there is
 * none (every real result is > min >= 64, so 0 is free); *hp is then the
 * hash after buf[end - 1].
 */
static inline size_t gear_scan1(const uint8_t *buf, size_t i, size_t end,
				uint64_t lim, uint64_t *hp)
{
	uint64_t h = *hp;

	for (; i < end; i++) {
		h = (h << 1) + gear[buf[i]];
		if (__builtin_expect(h < lim, 0))
			return i + 1;
	}
	*hp = h;
	return 0;
}

/*
 * A lane of the stripe at buf[i..i + 4 * seg) matched at step j; hs[] are
 * the four lane hashes after step j. Lanes before the first matching one
 * have not matched up to j: finish them in order from j + 1, and if none
 * matches, the first matching lane's position is the cut.
 */
static size_t lanes_resolve(const uint8_t *buf, size_t i, size_t seg, size_t j,
			    uint64_t hs[GEAR_LANES], uint64_t lim)
{
	size_t k, l, cut;

	for (k = 0; hs[k] >= lim; k++)
		;
	for (l = 0; l < k; l++) {
		size_t start = i + l * seg;

		cut = gear_scan1(buf, start + j + 1, start + seg, lim, &hs[l]);
		if (cut)
			return cut;
	}
	return i + k * seg + j + 1;
}

/*
 * Roll the exact hash *hp (the hash after buf[i - 1], or 0 at min) over
 * buf[i..end) and return one past the first position whose hash is below
 * lim, or 0 when none is; *hp is then the hash after buf[end - 1].
 * Needs i >= min and, for the lanes, nothing before min: lanes 1..3 only
 * look back into the stripe itself.
 */
static size_t gear_scan(const uint8_t *buf, size_t i, size_t end, uint64_t lim,
			uint64_t *hp)
{
	uint64_t h = *hp;

	while (end - i >= GEAR_LANES * GEAR_FORGET) {
		size_t seg = (end - i) / GEAR_LANES, j;
		const uint8_t *p0, *p1, *p2, *p3;
		uint64_t h0 = h, h1 = 0, h2 = 0, h3 = 0;

		if (seg > GEAR_SEG_MAX)
			seg = GEAR_SEG_MAX;
		p0 = buf + i;
		p1 = p0 + seg;
		p2 = p1 + seg;
		p3 = p2 + seg;
		for (j = GEAR_FORGET; j > 0; j--) {
			h1 = (h1 << 1) + gear[p1[-(ptrdiff_t)j]];
			h2 = (h2 << 1) + gear[p2[-(ptrdiff_t)j]];
			h3 = (h3 << 1) + gear[p3[-(ptrdiff_t)j]];
		}
		for (j = 0; j < seg; j++) {
			h0 = (h0 << 1) + gear[p0[j]];
			h1 = (h1 << 1) + gear[p1[j]];
			h2 = (h2 << 1) + gear[p2[j]];
			h3 = (h3 << 1) + gear[p3[j]];
			/* Rarely true: gcc folds the four tests into a min
			 * and one branch, which is as cheap as it gets. */
			if (__builtin_expect(h0 < lim, 0) ||
			    __builtin_expect(h1 < lim, 0) ||
			    __builtin_expect(h2 < lim, 0) ||
			    __builtin_expect(h3 < lim, 0)) {
				uint64_t hs[GEAR_LANES] = {h0, h1, h2, h3};

				return lanes_resolve(buf, i, seg, j, hs, lim);
			}
		}
		h = h3;
		i += GEAR_LANES * seg;
	}
	*hp = h;
	return gear_scan1(buf, i, end, lim, hp);
}

size_t chunker_next(const chunk_params *p, const uint8_t *buf, size_t len)
{
	size_t normal, cut;
	uint64_t h = 0;
	unsigned bits;

	if (len == 0)
		return 0;
	/* Parameters come from a catalog and are checked at open; a bad set
	 * here is a caller bug. Cutting nowhere keeps the result in range
	 * without undefined shifts below. */
	if (chunk_params_check(p) < 0)
		return len;
	if (len <= p->min)
		return len;
	if (len > p->max)
		len = p->max;

	/* avg is a power of two in [128, 2^22], so bits is 7..22: the hard
	 * mask has bits + 2 <= 24 top bits, the easy one bits - 2 >= 5, and
	 * "those top bits are zero" is "h < 2^(64 - mask bits)". */
	bits = (unsigned)__builtin_ctz(p->avg);
	normal = len < p->avg ? len : p->avg;

	/* Hashing starts at min with h = 0: the skipped bytes never count. */
	cut = gear_scan(buf, p->min, normal, UINT64_C(1) << (64 - (bits + 2)),
			&h);
	if (cut)
		return cut;
	cut = gear_scan(buf, normal, len, UINT64_C(1) << (64 - (bits - 2)), &h);
	if (cut)
		return cut;
	/* No match: either the forced cut at max or the end of the file. */
	return len;
}
