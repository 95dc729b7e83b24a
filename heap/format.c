/*
 * heap/format.c - what makes a file an arrheap heap: the checks heap_open
 * runs on an existing file before LMDB maps it, and the arrheap meta record.
 *
 * The pre-check reads LMDB's two meta pages with pread and modifies nothing.
 * It exists because LMDB trusts its file: a truncated file would SIGBUS on
 * the first read past EOF, and a foreign file opened with MDB_WRITEMAP is
 * ftruncated to the map size.  So every verdict here is reached from bytes
 * read, never from letting LMDB try.
 *
 * LMDB 0.9 meta page (libraries/liblmdb/mdb.c, MDB_page + MDB_meta, LP64),
 * page 0 at offset 0, page 1 at offset psize:
 *
 *   off  size  field
 *     0     8  mp_pgno            page number (0 or 1)
 *     8     2  mp_pad
 *    10     2  mp_flags           P_META = 0x08
 *    12     4  mp_lower/upper
 *    16     4  mm_magic           0xBEEFC0DE (byte-swapped: other byte order)
 *    20     4  mm_version         MDB_DATA_VERSION = 1
 *    24     8  mm_address
 *    32     8  mm_mapsize
 *    40    48  mm_dbs[0] (FREE)   its first u32 md_pad holds the page size
 *    88    48  mm_dbs[1] (MAIN)
 *   136     8  mm_last_pg         last used page number
 *   144     8  mm_txnid           the newer of the two metas is current
 *
 * Verdicts: page 0 not an LMDB meta -> AH_EFORMAT (empty, short, random,
 * other byte order, other LMDB data version); page size other than ours ->
 * AH_EFORMAT; page 1 missing or not a meta -> AH_ECORRUPT (damaged meta);
 * file shorter than (last_pg + 1) * psize of the current meta ->
 * AH_ECORRUPT (truncated); a damaged page of the main or "meta" tree, the
 * two heap_open reads through LMDB -> AH_ECORRUPT (heap_pagecheck_open).
 * Those two trees are the catalog: when their pages show every named DB
 * with env_catalog.c's flags and a meta record heap_meta_check accepts,
 * the catalog is proven (*catalog) and a writable open needs no read-only
 * environment to check it first; anything else is left to that
 * environment, whose verdict (env_catalog.c heap_env_catalog) stands.
 *
 * The arrheap meta record, key "arrheap.meta" in named DB "meta", 64 bytes
 * in native byte order:
 *
 *   off  size  field
 *     0     8  magic              "ARRHEAP\0"
 *     8     4  format version     1, 2 or 3 (heap.h: 3 = may hold holds)
 *    12     4  page size          bytes
 *    16     4  byte-order marker  0x01020304
 *    20     4  number of classes  HEAP_NCLASSES
 *    24    20  class page counts  u32 each: 1, 4, 16, 64, 256
 *    44     4  check              format 2: low 32 bits of XXH3-64 of the
 *                                 other 60 bytes; format 1: 0
 *    48    16  uuid               random, fixed at creation
 *
 * Any mismatch of the fixed fields is AH_EFORMAT; a format-2 record whose
 * check fails is AH_ECORRUPT (a flipped uuid byte, say).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "heap/codec.h"
#include "heap/fault.h"
#include "heap/heap_int.h"

#define LMDB_MAGIC 0xBEEFC0DEu
#define LMDB_MAGIC_SWAPPED 0xDEC0EFBEu
#define LMDB_DATA_VERSION 1u
#define LMDB_P_META 0x08u
#define META_OFF_FLAGS 10
#define META_OFF_MAGIC 16
#define META_OFF_VERSION 20
#define META_OFF_PSIZE 40
#define META_OFF_LASTPG 136
#define META_OFF_TXNID 144
#define META_READ 152

#define BYTE_ORDER_MARK 0x01020304u
static const char meta_magic[8] = "ARRHEAP";

struct lmdb_meta {
	uint32_t psize;
	uint64_t last_pg;
	uint64_t txnid;
};


/* 1: a valid meta page; 0: not one; <0: I/O error. *swapped when the magic
 * is LMDB's in the other byte order. */
static int read_meta(int fd, off_t off, struct lmdb_meta *m, bool *swapped,
                     uint8_t buf[META_READ])
{
	ssize_t n;
	uint16_t flags;

	do
		n = pread(fd, buf, META_READ, off);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return AH_EIO;
	if ((size_t)n < META_READ)
		return 0;
	if (get_u32(buf + META_OFF_MAGIC) == LMDB_MAGIC_SWAPPED)
		*swapped = true;
	memcpy(&flags, buf + META_OFF_FLAGS, sizeof flags);
	if (!(flags & LMDB_P_META) || get_u32(buf + META_OFF_MAGIC) != LMDB_MAGIC ||
	    get_u32(buf + META_OFF_VERSION) != LMDB_DATA_VERSION)
		return 0;
	m->psize = get_u32(buf + META_OFF_PSIZE);
	m->last_pg = get_u64(buf + META_OFF_LASTPG);
	m->txnid = get_u64(buf + META_OFF_TXNID);
	return 1;
}

/* The pages the walk read prove the catalog: it saw every named DB and a
 * meta record; is the record one heap_open accepts? */
static bool catalog_proven(uint32_t psize, const uint8_t rec[HEAP_META_BYTES])
{
	uint8_t uuid[16];
	uint32_t ver;

	return heap_meta_check(rec, HEAP_META_BYTES, psize, uuid, &ver) == 0;
}

/* A transaction no heap reaches (2^48 commits: 9 years at a million a
 * second); past it a damaged txnid could run LMDB's counter to the wrap. */
#define TXNID_MAX (1ull << 48)

/* What LMDB's two meta pages can hold (ARCHITECTURE.md §4): commit T
 * writes its meta to page T & 1, so page 0 holds even txnids and page 1
 * odd ones, except 0 on both before the first commit, when neither names
 * a page past the metas.  Anything else is damage LMDB would act on: with
 * equal txnids its readers use page T & 1 but its next write starts from
 * page 0's tree (silently undoing commit T); with a txnid on the wrong
 * page, or both zeroed on a used heap, reads serve an older commit and the
 * next writes build on it; a txnid near 2^64 wraps to 0 a few commits
 * later and the heap stops opening. */
static int metas_plausible(const struct lmdb_meta *m0,
                           const struct lmdb_meta *m1)
{
	if (m0->txnid == 0 && m1->txnid == 0)
		return m0->last_pg > 1 || m1->last_pg > 1
		       ? CORRUPT("LMDB meta pages hold txnid 0 but name pages")
		       : 0;
	if (m0->txnid == m1->txnid)
		return CORRUPT("LMDB meta pages 0 and 1 hold the same txnid");
	if ((m0->txnid & 1) != 0 || (m1->txnid & 1) != 1)
		return CORRUPT("LMDB meta page holds a txnid of the other page");
	if (m0->txnid >= TXNID_MAX || m1->txnid >= TXNID_MAX)
		return CORRUPT("LMDB meta txnid beyond 2^48");
	return 0;
}

int heap_format_precheck(int fd, uint32_t psize, const struct stat *st0,
                         bool *catalog)
{
	struct stat st;
	struct lmdb_meta m0, m1;
	uint8_t raw[2][META_READ], rec[HEAP_META_BYTES];
	bool swapped = false, seen;
	int rc;

	*catalog = false;
	if (!S_ISREG(st0->st_mode) || st0->st_size == 0)
		return AH_EFORMAT;
	rc = read_meta(fd, 0, &m0, &swapped, raw[0]);
	if (rc <= 0)
		return rc < 0 ? rc : AH_EFORMAT;
	if (m0.psize != psize)
		return AH_EFORMAT;
	rc = read_meta(fd, (off_t)psize, &m1, &swapped, raw[1]);
	if (rc < 0)
		return rc;
	/* The size after the metas were read: a writer in another process
	 * extends the file before a commit's meta names the new pages, so a
	 * size taken before the read could be older than the meta (a heap
	 * another creator had just published, committing its first txn,
	 * was called "shorter than its last used page"). */
	if (fstat(fd, &st) != 0)
		return AH_EIO;
	if (rc == 0 || m1.psize != psize)
		return CORRUPT("LMDB meta page 1 missing or damaged");
	if ((rc = metas_plausible(&m0, &m1)))
		return rc;
	if (m1.txnid > m0.txnid)
		m0 = m1;
	if (m0.last_pg >= UINT64_MAX / psize ||
	    (uint64_t)st.st_size < (m0.last_pg + 1) * psize)
		return CORRUPT("file shorter than its last used page");
	/* heap_open's catalog reads the main and "meta" trees through LMDB:
	 * their pages are checked first (heap/pagecheck.c), and what they
	 * hold may spare it the read-only environment. */
	rc = heap_pagecheck_open(fd, psize, (uint64_t)st.st_size, raw[0],
	                         raw[1], rec, &seen);
	*catalog = rc == 0 && seen && catalog_proven(psize, rec);
	return rc;
}

bool heap_format_unborn(int fd, uint32_t psize, const struct stat *st)
{
	struct lmdb_meta m0, m1;
	uint8_t raw[META_READ];
	bool swapped = false;

	/* An empty file stays AH_EFORMAT: it may be a heap truncated by
	 * accident, and a heap never silently starts fresh. */
	if (!S_ISREG(st->st_mode) || st->st_size == 0)
		return false;
	return read_meta(fd, 0, &m0, &swapped, raw) == 1 && m0.psize == psize &&
	       read_meta(fd, (off_t)psize, &m1, &swapped, raw) == 1 &&
	       m1.psize == psize && m0.txnid == 0 && m1.txnid == 0 &&
	       m0.last_pg <= 1 && m1.last_pg <= 1;
}

static uint32_t meta_check(const uint8_t *p)
{
	uint8_t tmp[HEAP_META_BYTES];

	memcpy(tmp, p, sizeof tmp);
	memset(tmp + 44, 0, 4);
	return (uint32_t)XXH3_64bits(tmp, sizeof tmp);
}

void heap_meta_encode(uint8_t out[HEAP_META_BYTES], uint32_t psize,
                      const uint8_t uuid[16], uint32_t version)
{
	uint32_t v;

	memset(out, 0, HEAP_META_BYTES);
	memcpy(out, meta_magic, 8);
	put_u32(out + 8, version);
	put_u32(out + 12, psize);
	v = BYTE_ORDER_MARK;
	put_u32(out + 16, v);
	v = HEAP_NCLASSES;
	put_u32(out + 20, v);
	memcpy(out + 24, heap_class_pages, 4 * HEAP_NCLASSES);
	memcpy(out + 48, uuid, 16);
	if (version >= 2) {
		v = meta_check(out);
		put_u32(out + 44, v);
	}
}

int heap_uuid_new(uint8_t uuid[16])
{
	if (getrandom(uuid, 16, 0) != 16)
		return AH_EIO;
	uuid[6] = (uint8_t)((uuid[6] & 0x0f) | 0x40);
	uuid[8] = (uint8_t)((uuid[8] & 0x3f) | 0x80);
	return 0;
}

int heap_meta_check(const void *val, size_t len, uint32_t psize,
                    uint8_t uuid[16], uint32_t *version)
{
	uint8_t want[HEAP_META_BYTES];
	const uint8_t *p = val;
	uint32_t ver;

	if (len != HEAP_META_BYTES)
		return AH_EFORMAT;
	/* Byte order first, so a foreign-endian heap is named as such. */
	if (memcmp(p, meta_magic, 8) != 0 || get_u32(p + 16) != BYTE_ORDER_MARK)
		return AH_EFORMAT;
	ver = get_u32(p + 8);
	if (ver < HEAP_FORMAT_MIN || ver > HEAP_FORMAT_VERSION)
		return AH_EFORMAT;
	heap_meta_encode(want, psize, p + 48, ver);
	if (memcmp(p, want, 44) != 0)
		return AH_EFORMAT;
	if (memcmp(p + 44, want + 44, 4) != 0)
		return ver >= 2 ? CORRUPT("meta record checksum")
		                : AH_EFORMAT;
	memcpy(uuid, p + 48, 16);
	*version = ver;
	return 0;
}

/* Frames every value of table tb in place (MDB_CURRENT). */
static int upgrade_table(heap_txn *t, int tb)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v, nv;
	uint8_t *key = NULL, *buf = NULL;
	size_t kcap = 0, bcap = 0;
	int rc, op = MDB_FIRST;

	TRY(heap_err(HEAP_MDB(mdb_cursor_open(t->txn, t->h->dbi[tb], &cur))));
	while ((rc = HEAP_MDB(mdb_cursor_get(cur, &k, &v, op))) == 0) {
		op = MDB_NEXT;
		if (k.mv_size > kcap || v.mv_size + HEAP_RECORD_FRAME > bcap) {
			kcap = k.mv_size > kcap ? k.mv_size : kcap;
			bcap = v.mv_size + HEAP_RECORD_FRAME > bcap ?
			       v.mv_size + HEAP_RECORD_FRAME : bcap;
			free(key);
			free(buf);
			key = malloc(kcap ? kcap : 1);
			buf = malloc(bcap);
			if (key == NULL || buf == NULL) {
				rc = AH_ENOMEM;
				goto out;
			}
		}
		memcpy(key, k.mv_data, k.mv_size);
		heap_record_frame(tb, key, k.mv_size, v.mv_data, v.mv_size, buf);
		k.mv_data = key;
		nv.mv_size = v.mv_size + HEAP_RECORD_FRAME;
		nv.mv_data = buf;
		TRY(heap_space_need(t, (k.mv_size + nv.mv_size + 16) /
		                                    t->h->psize + 2));
		TRY(heap_err(HEAP_MDB(mdb_cursor_put(cur, &k, &nv,
		                                          MDB_CURRENT))));
	}
	rc = rc == MDB_NOTFOUND ? 0 : heap_err(rc);
out:
	if (cur != NULL)
		mdb_cursor_close(cur);
	free(key);
	free(buf);
	return rc;
}

int heap_upgrade(heap *h)
{
	heap_txn *t;
	MDB_val k = { sizeof HEAP_META_KEY - 1, (void *)HEAP_META_KEY }, v;
	uint8_t rec[HEAP_META_BYTES], uuid[16];
	uint32_t ver;
	int rc;

	if ((rc = heap_txn_begin(h, false, &t)) != 0)
		return rc;
	/* Inside the writer lock: another process may have upgraded it. */
	TRY(heap_err(HEAP_MDB(mdb_get(t->txn, h->dbi[HEAP_DBI_META], &k, &v))));
	TRY(heap_meta_check(v.mv_data, v.mv_size, h->psize, uuid, &ver));
	if (ver < HEAP_FORMAT_BASE) {
		uint64_t names[4];

		for (int tb = 0; tb < HEAP_T__COUNT; tb++)
			TRY(upgrade_table(t, tb));
		TRY(heap_names_compute(t->txn, h->dbi, names));
		TRY(heap_space_need(t, 2));
		TRY(heap_names_put_raw(t->txn, h->dbi[HEAP_DBI_META], names));
		heap_meta_encode(rec, h->psize, uuid, HEAP_FORMAT_BASE);
		v.mv_size = sizeof rec;
		v.mv_data = rec;
		TRY(heap_space_need(t, 2));
		TRY(heap_err(HEAP_MDB(mdb_put(t->txn, h->dbi[HEAP_DBI_META], &k,
		                                   &v, 0))));
	}
	rc = heap_txn_commit(t);
	t = NULL;
	if (rc == 0)
		h->format = ver < HEAP_FORMAT_BASE ? HEAP_FORMAT_BASE : ver;
out:
	if (t != NULL)
		heap_txn_abort(t);
	return rc;
}

int heap_set_uuid(heap_txn *t, const uint8_t uuid[16])
{
	heap *h = t->h;
	MDB_val k = { sizeof HEAP_META_KEY - 1, (void *)HEAP_META_KEY }, v;
	uint8_t rec[HEAP_META_BYTES], old[16];
	uint32_t ver;
	int rc;

	if ((rc = heap_txn_usable(t, true)) != 0)
		return rc;
	TRY(heap_err(HEAP_MDB(mdb_get(t->txn, h->dbi[HEAP_DBI_META], &k, &v))));
	TRY(heap_meta_check(v.mv_data, v.mv_size, h->psize, old, &ver));
	heap_meta_encode(rec, h->psize, uuid, ver);
	v.mv_size = sizeof rec;
	v.mv_data = rec;
	TRY(heap_space_need(t, 2));
	TRY(heap_err(HEAP_MDB(mdb_put(t->txn, h->dbi[HEAP_DBI_META], &k, &v, 0))));
	memcpy(h->uuid, uuid, 16);
out:
	return heap_txn_fail(t, rc);
}

int heap_format_mark(heap_txn *t, uint32_t ver)
{
	heap *h = t->h;
	MDB_val k = { sizeof HEAP_META_KEY - 1, (void *)HEAP_META_KEY }, v;
	uint8_t rec[HEAP_META_BYTES], uuid[16];
	uint32_t cur;
	int rc;

	if (t->format_mark >= ver)
		return 0;
	if (t->rdonly || ver > HEAP_FORMAT_VERSION)
		return AH_EINVAL;
	if ((rc = heap_trees_usable(h, HEAP_TREE_BIT(HEAP_TREE_META))) != 0)
		return rc;
	rc = heap_err(HEAP_MDB(mdb_get(t->txn, h->dbi[HEAP_DBI_META], &k, &v)));
	if (rc == 0)
		rc = heap_meta_check(v.mv_data, v.mv_size, h->psize, uuid, &cur);
	if (rc == 0 && cur < ver) {
		heap_meta_encode(rec, h->psize, uuid, ver);
		v.mv_size = sizeof rec;
		v.mv_data = rec;
		rc = heap_space_need(t, 2);
		if (rc == 0)
			rc = heap_err(HEAP_MDB(mdb_put(t->txn, h->dbi[HEAP_DBI_META],
			                               &k, &v, 0)));
	}
	if (rc)
		return rc;
	t->format_mark = cur > ver ? cur : ver; /* heap_txn_commit adopts it */
	return 0;
}
