/*
 * tools/pg/stored.c - reads what a heap records about its PostgreSQL source
 * (see engine.h and sink.h).  Read-only: one read transaction.
 *
 * It must never write the heap, and never take a damaged record for a valid
 * one: once pg.lsn exists, a missing pg.identity or pg.tables, or any record
 * that does not parse or fit its buffer, fails the whole read; only
 * pg.stats, totals for messages, is read leniently.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "tools/pg/engine.h"

void identity_fmt(char *buf, size_t len, const char *sysid, const char *db, const char *slot,
                  const char *pub)
{
	snprintf(buf, len, "system=%s\ndatabase=%s\nslot=%s\npublication=%s\n", sysid, db, slot, pub);
}

void identity_get(const char *id, const char *key, char *buf, size_t len)
{
	size_t kl = strlen(key);

	buf[0] = 0;
	for (const char *p = id; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (!strncmp(p, key, kl) && p[kl] == '=') {
			size_t n = strcspn(p + kl + 1, "\n");
			if (n >= len)
				n = len - 1;
			memcpy(buf, p + kl + 1, n);
			buf[n] = 0;
			return;
		}
	}
}

void snapshot_fmt(char *buf, size_t len, uint32_t relid_max, uint32_t pub_oid)
{
	snprintf(buf, len, "relid_max=%" PRIu32 "\npublication_oid=%" PRIu32 "\n", relid_max, pub_oid);
}

/* The value of the line "name=..." of text, or NULL. */
static const char *line_value(const char *text, const char *name, size_t nl, size_t *vl)
{
	for (const char *p = text; *p; p += strcspn(p, "\n") + (p[strcspn(p, "\n")] != 0)) {
		if (!strncmp(p, name, nl) && p[nl] == '=') {
			*vl = strcspn(p + nl + 1, "\n");
			return p + nl + 1;
		}
	}
	return NULL;
}

int settings_diff(const char *heap, const char *conn, char *a, char *b, size_t len)
{
	/* every line of either side must be in the other, with its value */
	for (int side = 0; side < 2; side++) {
		const char *x = side ? conn : heap, *y = side ? heap : conn;
		for (const char *p = x; *p; p += strcspn(p, "\n") + (p[strcspn(p, "\n")] != 0)) {
			size_t nl = strcspn(p, "=\n"), xl = 0, yl = 0;
			const char *xv = p[nl] == '=' ? p + nl + 1 : p + nl;
			const char *yv = line_value(y, p, nl, &yl);
			xl = strcspn(xv, "\n");
			if (yv && yl == xl && !memcmp(xv, yv, xl))
				continue;
			const char *hv = side ? yv : xv, *cv = side ? xv : yv;
			size_t hl = side ? yl : xl, cl = side ? xl : yl;
			snprintf(a, len, "%.*s=%s%.*s%s", (int)nl, p, hv ? "'" : "(unset)", hv ? (int)hl : 0,
			         hv ? hv : "", hv ? "'" : "");
			snprintf(b, len, "%.*s=%s%.*s%s", (int)nl, p, cv ? "'" : "(unset)", cv ? (int)cl : 0,
			         cv ? cv : "", cv ? "'" : "");
			return 1;
		}
	}
	return 0;
}

int stored_read(ah_heap *h, pg_stored *st, char *err, size_t errlen)
{
	ah_txn *txn = NULL;
	const void *p;
	size_t len;
	int rc;

	memset(st, 0, sizeof *st);
	if ((rc = ah_txn_begin(h, AH_TXN_RDONLY, &txn)) != 0) {
		snprintf(err, errlen, "reading the heap: %s", ah_strerror(rc));
		return -1;
	}
	rc = ah_source_get(txn, "pg.lsn", &p, &len);
	if (rc == AH_ENOTFOUND) {
		ah_txn_abort(txn);
		return 0;
	}
	if (rc != 0 || lsn_parse(p, len, &st->lsn) != 0)
		goto bad;
	st->have_lsn = 1;
	if (ah_source_get(txn, "pg.identity", &p, &len) != 0 || len >= sizeof st->identity)
		goto bad;
	memcpy(st->identity, p, len);
	st->identity[len] = 0;
	if (ah_source_get(txn, "pg.tables", &p, &len) != 0 ||
	    tables_parse(p, len, &st->t, &st->nt, err, errlen) != 0)
		goto bad;
	rc = ah_source_get(txn, "pg.settings", &p, &len);
	if (rc == 0 && len < sizeof st->settings && !memchr(p, 0, len)) {
		memcpy(st->settings, p, len);
		st->settings[len] = 0;
	} else if (rc != AH_ENOTFOUND) {
		goto bad;
	}
	rc = ah_source_get(txn, "pg.snapshot", &p, &len);
	if (rc == 0) {
		char tmp[100];
		int n = 0;
		if (len >= sizeof tmp)
			goto bad;
		memcpy(tmp, p, len);
		tmp[len] = 0;
		if (sscanf(tmp, "relid_max=%" SCNu32 "\npublication_oid=%" SCNu32 "\n%n", &st->relid_max,
		           &st->pub_oid, &n) != 2 || (size_t)n != len)
			goto bad;
		st->have_snapshot = 1;
	} else if (rc != AH_ENOTFOUND) {
		goto bad;
	}
	if (ah_source_get(txn, "pg.stats", &p, &len) == 0 && len < 100) {
		char tmp[100];
		memcpy(tmp, p, len);
		tmp[len] = 0;
		sscanf(tmp, "txns=%" SCNu64 " updates=%" SCNu64, &st->txns, &st->updates);
	}
	ah_txn_abort(txn);
	return 0;
bad:
	ah_txn_abort(txn);
	snprintf(err, errlen, "the heap has no valid pg.lsn, pg.identity and pg.tables records: "
	         "it was not made by ah-pgsync");
	return -1;
}

int stored_views(ah_heap *h, pg_buf *out, int *have, char *err, size_t errlen)
{
	ah_txn *txn = NULL;
	const void *p;
	size_t len;
	int rc;

	*have = 0;
	out->len = 0;
	if ((rc = ah_txn_begin(h, AH_TXN_RDONLY, &txn)) == 0) {
		rc = ah_source_get(txn, "pg.views", &p, &len);
		if (rc == 0) {
			*have = 1;
			rc = pg_buf_put(out, p, len) ? AH_ENOMEM : 0;
		} else if (rc == AH_ENOTFOUND) {
			rc = 0;
		}
	}
	ah_txn_abort(txn);
	if (rc)
		snprintf(err, errlen, "reading the heap's pg.views: %s", ah_strerror(rc));
	return rc ? -1 : 0;
}
