/*
 * arrangement/spine.c - the arrangement record and the merge policy.
 *
 * Record layout (table HEAP_T_ARR, value; native byte order, read with
 * memcpy since LMDB values are only 2-byte aligned):
 *
 *   off  size  field
 *     0     4  magic "AHAR"
 *     4     2  layout version (SPINE_VERSION, 1)
 *     6     2  reserved, 0
 *     8     8  upper
 *    16     8  since
 *    24     4  nbatches
 *    28     4  nmerges
 *    32  16*n  batches, oldest first: u64 batch id, u64 updates
 *     ..       merges, each: u32 first, u32 count, u64 since, u64 credit,
 *              u64 done, u64 partial_id, u32 has_boundary, u32 klen,
 *              u32 vlen, u32 0, key bytes, val bytes, 0-padding to 8
 *
 * Policy (differential dataflow's spine_fueled, with the fan-in of a
 * tiered LSM): after a push, SPINE_FANIN adjacent idle batches merge when
 * the newest holds more than half the oldest's updates.  Among idle
 * batches sizes then fall by more than 2x every SPINE_FANIN - 1 places, so
 * the spine holds O(log n) batches, and an update is rewritten about
 * log_FANIN(n / append) times instead of log_2 (at 10M updates in appends
 * of 100k: 3.4 merge reads per update appended against 5.1 pairwise).
 * A merge is paid for with fuel: every appended update grants
 * SPINE_FUEL_PER_UPDATE units to every merge in progress; a merge runs
 * once its credit reaches a quantum (or what it has left), and otherwise
 * stays suspended at a (key, val) boundary in the record.  Merges of at
 * most a quantum run to completion at once.  So no
 * append pays for one huge merge, and a crash mid-merge loses at most the
 * work of the transaction in flight: inputs stay in the chain until the
 * output replaces them in the same commit.
 *
 * It must never free or rewrite an input batch before the commit that
 * replaces it by its merge's output (S1-S4 hold after every function here).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrangement/merge.h"
#include "arrangement/spine.h"
#include "heap/codec.h"

#define SPINE_MAGIC 0x52414841u /* "AHAR" little-endian */
#define SPINE_VERSION 1
#define SPINE_HDR 32

/* ----------------------------------------------------------- encoding */

void spine_clear(spine *sp)
{
	for (uint32_t i = 0; i < sp->nmerges; i++) {
		free(sp->merges[i].key);
		free(sp->merges[i].val);
	}
	free(sp->batches);
	free(sp->merges);
	memset(sp, 0, sizeof *sp);
}

static int decode_merge(codec_rd *r, spine_merge *m)
{
	m->first = rd_u32(r);
	m->count = rd_u32(r);
	m->since = frontier_of(rd_u64(r));
	m->credit = rd_u64(r);
	m->done = rd_u64(r);
	m->partial_id = rd_u64(r);
	m->has_boundary = rd_u32(r) != 0;
	uint32_t klen = rd_u32(r), vlen = rd_u32(r);
	(void)rd_u32(r);
	if (r->bad || (size_t)klen + vlen > r->left)
		return CORRUPT("arrangement record: merge");
	m->klen = klen;
	m->vlen = vlen;
	m->key = malloc(klen ? klen : 1);
	m->val = malloc(vlen ? vlen : 1);
	if (!m->key || !m->val)
		return AH_ENOMEM;
	rd_bytes(r, m->key, klen);
	rd_bytes(r, m->val, vlen);
	size_t pad = (8 - ((klen + vlen) & 7)) & 7;
	uint8_t zero[8];
	rd_bytes(r, zero, pad);
	return r->bad ? CORRUPT("arrangement record: merge boundary") : 0;
}

int spine_load(heap_txn *t, const char *name, spine *sp)
{
	const void *v;
	size_t vlen;
	memset(sp, 0, sizeof *sp);
	int rc = heap_get(t, HEAP_T_ARR, name, strlen(name), &v, &vlen);
	if (rc)
		return rc;
	codec_rd r = { v, vlen, false };
	uint32_t magic = rd_u32(&r);
	uint16_t ver, reserved;
	rd_bytes(&r, &ver, 2);
	rd_bytes(&r, &reserved, 2);
	sp->upper = frontier_of(rd_u64(&r));
	sp->since = frontier_of(rd_u64(&r));
	uint32_t nb = rd_u32(&r), nm = rd_u32(&r);
	if (r.bad || magic != SPINE_MAGIC || ver != SPINE_VERSION ||
	    !frontier_le(sp->since, sp->upper) || (uint64_t)nb * 16 > r.left ||
	    nm > nb)
		return CORRUPT("arrangement record header");
	sp->batches = heap_zalloc(nb ? nb : 1, sizeof *sp->batches);
	sp->merges = heap_zalloc(nm ? nm : 1, sizeof *sp->merges);
	if (!sp->batches || !sp->merges) {
		spine_clear(sp);
		return AH_ENOMEM;
	}
	sp->nbatches = nb;
	for (uint32_t i = 0; i < nb; i++) {
		sp->batches[i].id = rd_u64(&r);
		sp->batches[i].updates = rd_u64(&r);
	}
	for (uint32_t i = 0; i < nm; i++) {
		sp->nmerges = i + 1;
		rc = decode_merge(&r, &sp->merges[i]);
		if (!rc && ((uint64_t)sp->merges[i].first + sp->merges[i].count > nb ||
		            sp->merges[i].count == 0))
			rc = CORRUPT("arrangement record: merge range");
		if (rc) {
			spine_clear(sp);
			return rc;
		}
	}
	if (r.bad || r.left != 0) {
		spine_clear(sp);
		return CORRUPT("arrangement record length");
	}
	return 0;
}

int spine_store(heap_txn *t, const char *name, const spine *sp)
{
	size_t len = SPINE_HDR + (size_t)sp->nbatches * 16;
	for (uint32_t i = 0; i < sp->nmerges; i++)
		len += 56 + ((sp->merges[i].klen + sp->merges[i].vlen + 7) & ~(size_t)7);
	uint8_t *buf = calloc(1, len), *p = buf;
	if (!buf)
		return AH_ENOMEM;
	wr_u32(&p, SPINE_MAGIC);
	put_u16(p, SPINE_VERSION);
	p += 4; /* version, then 2 reserved bytes */
	wr_u64(&p, frontier_time(sp->upper));
	wr_u64(&p, frontier_time(sp->since));
	wr_u32(&p, sp->nbatches);
	wr_u32(&p, sp->nmerges);
	for (uint32_t i = 0; i < sp->nbatches; i++) {
		wr_u64(&p, sp->batches[i].id);
		wr_u64(&p, sp->batches[i].updates);
	}
	for (uint32_t i = 0; i < sp->nmerges; i++) {
		const spine_merge *m = &sp->merges[i];
		wr_u32(&p, m->first);
		wr_u32(&p, m->count);
		wr_u64(&p, frontier_time(m->since));
		wr_u64(&p, m->credit);
		wr_u64(&p, m->done);
		wr_u64(&p, m->partial_id);
		wr_u32(&p, m->has_boundary);
		wr_u32(&p, (uint32_t)m->klen);
		wr_u32(&p, (uint32_t)m->vlen);
		wr_u32(&p, 0);
		wr_bytes(&p, m->key, m->klen);
		wr_bytes(&p, m->val, m->vlen);
		p += (8 - ((m->klen + m->vlen) & 7)) & 7;
	}
	int rc = heap_put(t, HEAP_T_ARR, name, strlen(name), buf, len);
	free(buf);
	return rc;
}

/* ------------------------------------------------------------- merging */

static int in_merge(const spine *sp, uint32_t i)
{
	for (uint32_t m = 0; m < sp->nmerges; m++)
		if (i >= sp->merges[m].first &&
		    i < sp->merges[m].first + sp->merges[m].count)
			return (int)m;
	return -1;
}

static uint64_t merge_size(const spine *sp, const spine_merge *m)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < m->count; i++)
		n += sp->batches[m->first + i].updates;
	return n;
}

static void free_inputs(batch **in, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		batch_free(in[i]);
	free(in);
}

int spine_complete(heap_txn *t, spine *sp, uint32_t mi, batch *const *in,
                   uint64_t out)
{
	spine_merge m = sp->merges[mi];
	int rc = 0;
	uint64_t out_updates = 0;
	if (out) {
		batch *ob;
		rc = batch_load_listed(t, out, &ob);
		if (rc)
			return rc;
		out_updates = ob->updates;
		batch_free(ob);
	}
	for (uint32_t i = 0; i < m.count; i++)
		if ((rc = batch_drop(t, in[i]->id)))
			return rc;
	uint32_t after = m.first + m.count;
	if (!out && after < sp->nbatches) {
		/* S2: the next batch now starts where the dropped run began. */
		batch *nb;
		if ((rc = batch_load_listed(t, sp->batches[after].id, &nb)))
			return rc;
		batch_desc d = nb->desc;
		d.lower = in[0]->desc.lower;
		rc = batch_set_desc(t, nb->id, &d);
		batch_free(nb);
		if (rc)
			return rc;
	}
	uint32_t keep = out ? 1 : 0;
	if (out) {
		sp->batches[m.first].id = out;
		sp->batches[m.first].updates = out_updates;
	}
	memmove(&sp->batches[m.first + keep], &sp->batches[after],
	        (sp->nbatches - after) * sizeof *sp->batches);
	sp->nbatches -= m.count - keep;
	free(m.key);
	free(m.val);
	memmove(&sp->merges[mi], &sp->merges[mi + 1],
	        (sp->nmerges - mi - 1) * sizeof *sp->merges);
	sp->nmerges--;
	for (uint32_t i = 0; i < sp->nmerges; i++)
		if (sp->merges[i].first > m.first)
			sp->merges[i].first -= m.count - keep;
	return 0;
}

int spine_set_boundary(spine_merge *m, const merge_resume *r2)
{
	uint8_t *k = malloc(r2->klen ? r2->klen : 1);
	uint8_t *v = malloc(r2->vlen ? r2->vlen : 1);

	if (!k || !v) {
		free(k);
		free(v);
		return AH_ENOMEM;
	}
	if (r2->klen)
		memcpy(k, r2->key, r2->klen);
	if (r2->vlen)
		memcpy(v, r2->val, r2->vlen);
	free(m->key);
	free(m->val);
	m->key = k;
	m->val = v;
	m->klen = r2->klen;
	m->vlen = r2->vlen;
	m->has_boundary = r2->has_boundary;
	m->partial_id = r2->partial_id;
	return 0;
}

uint64_t spine_merge_left(const spine *sp, const spine_merge *m)
{
	uint64_t size = merge_size(sp, m);

	return size > m->done ? size - m->done : 0;
}

/* Runs merge mi with fuel (0 = to the end); *finished when it completed. */
static int run_merge(heap_txn *t, pool *p, spine *sp, uint32_t mi,
                     uint64_t fuel, bool *finished)
{
	spine_merge *m = &sp->merges[mi];
	uint32_t nin = m->count;
	batch **in = calloc(nin, sizeof *in);
	merger *mg = NULL;
	int rc = 0;
	*finished = false;
	if (!in)
		return AH_ENOMEM;
	for (uint32_t i = 0; i < m->count && !rc; i++)
		rc = batch_load_listed(t, sp->batches[m->first + i].id, &in[i]);
	if (rc)
		goto out;
	merge_resume res = { m->has_boundary, m->key, m->klen, m->val, m->vlen,
	                     m->partial_id };
	if (fuel == 0 && !m->has_boundary && !m->partial_id) {
		/* a fresh merge to its end: on two threads when large */
		batch_writer *w = NULL;
		uint64_t units = 0, out_id = 0;
		bool ran = false;

		if ((rc = merge_parallel(t, p, in, m->count, m->since, &w, &units,
		                         &ran)))
			goto out;
		if (ran) {
			batch_desc d = { in[0]->desc.lower,
			                 in[m->count - 1]->desc.upper, m->since };

			m->done += units;
			m->credit = m->credit > units ? m->credit - units : 0;
			if ((rc = batch_writer_finish(w, &d, &out_id)))
				goto out;
			rc = spine_complete(t, sp, mi, in, out_id);
			*finished = true;
			goto out;
		}
	}
	if ((rc = merger_open(t, p, in, m->count, m->since, &res, &mg)))
		goto out;
	bool done = false;
	uint64_t spent = 0;
	if ((rc = merger_step(mg, fuel, &done, &spent)))
		goto out;
	m->done += spent;
	m->credit = m->credit > spent ? m->credit - spent : 0;
	if (done) {
		batch_desc d = { in[0]->desc.lower, in[m->count - 1]->desc.upper,
		                 m->since };
		uint64_t out_id = 0;
		if ((rc = merger_finish(mg, &d, &out_id)))
			goto out;
		rc = spine_complete(t, sp, mi, in, out_id);
		*finished = true;
	} else {
		merge_resume r2;
		if ((rc = merger_suspend(mg, &r2)))
			goto out;
		rc = spine_set_boundary(m, &r2);
	}
out:
	merger_free(mg);
	free_inputs(in, nin);
	return rc;
}

static int start_merge(heap_txn *t, pool *p, spine *sp, uint32_t first,
                       uint32_t count, uint64_t quantum, bool bg)
{
	spine_merge *nm = realloc(sp->merges, (sp->nmerges + 1) * sizeof *nm);
	if (!nm)
		return AH_ENOMEM;
	sp->merges = nm;
	spine_merge *m = &sp->merges[sp->nmerges++];
	memset(m, 0, sizeof *m);
	m->first = first;
	m->count = count;
	m->since = sp->since;
	if (bg || merge_size(sp, m) > quantum)
		return 0;
	bool fin;
	return run_merge(t, p, sp, sp->nmerges - 1, 0, &fin);
}

/* Starts the merges the size policy asks for, newest first, until stable
 * (bg: left to the merge thread, none run here): SPINE_FANIN adjacent
 * idle batches merge when the newest is more than half the oldest. */
int spine_tidy(heap_txn *t, pool *p, spine *sp, uint64_t quantum, bool bg)
{
	for (bool again = true; again;) {
		again = false;
		for (uint32_t i = sp->nbatches; i-- >= SPINE_FANIN;) {
			uint32_t first = i + 1 - SPINE_FANIN, j;
			for (j = first; j <= i && in_merge(sp, j) < 0; j++)
				;
			if (j <= i)
				continue;
			if (sp->batches[i].updates * 2 <= sp->batches[first].updates)
				continue;
			int rc = start_merge(t, p, sp, first, SPINE_FANIN, quantum,
			                     bg);
			if (rc)
				return rc;
			again = true;
			break;
		}
	}
	return 0;
}

/* Grants fuel to every merge and runs those with enough credit (bg: only
 * those whose credit is SPINE_BG_SLACK quanta past that: the merge thread
 * fell behind; twice that for the merge it is computing, avoid, whose
 * slice an inline step would make stale). */
static int spend(heap_txn *t, pool *p, spine *sp, uint64_t grant,
                 uint64_t quantum, bool bg, uint64_t avoid)
{
	for (uint32_t i = 0; i < sp->nmerges;) {
		spine_merge *m = &sp->merges[i];
		m->credit += grant;
		uint64_t size = merge_size(sp, m);
		uint64_t left = size > m->done ? size - m->done : 0;
		uint64_t need = left < quantum ? left : quantum;
		if (bg) /* twice for the merge the thread is on */
			need += SPINE_BG_SLACK * quantum *
			        (avoid && sp->batches[m->first].id == avoid ? 2 : 1);
		if (m->credit < need) {
			i++;
			continue;
		}
		bool fin;
		int rc = run_merge(t, p, sp, i, m->credit ? m->credit : 1, &fin);
		if (rc)
			return rc;
		if (!fin)
			i++;
	}
	return 0;
}

int spine_push(heap_txn *t, pool *p, spine *sp, uint64_t id, uint64_t n,
               uint64_t quantum, bool bg, uint64_t avoid)
{
	if (!quantum)
		quantum = SPINE_MERGE_QUANTUM;
	spine_batch *nb = realloc(sp->batches, (sp->nbatches + 1) * sizeof *nb);
	if (!nb)
		return AH_ENOMEM;
	sp->batches = nb;
	sp->batches[sp->nbatches].id = id;
	sp->batches[sp->nbatches].updates = n;
	sp->nbatches++;
	int rc = spend(t, p, sp, SPINE_FUEL_PER_UPDATE * (n ? n : 1), quantum,
	               bg, avoid);
	if (!rc)
		rc = spine_tidy(t, p, sp, quantum, bg);
	return rc;
}

/* Does the chain hold anything a merge would compact (a batch whose
 * since lags the arrangement's)? */
static int lagging(heap_txn *t, const spine *sp, bool *lag)
{
	*lag = false;
	for (uint32_t i = 0; i < sp->nbatches && !*lag; i++) {
		batch *b;
		int rc = batch_load_listed(t, sp->batches[i].id, &b);
		if (rc)
			return rc;
		/* its since lags, and it holds times that since would move */
		*lag = !frontier_le(sp->since, b->desc.since) &&
		       time_before(frontier_time(b->desc.lower), sp->since);
		batch_free(b);
	}
	return 0;
}

/* Physical compaction with no fuel limit: ONE merge of the whole trace.
 * Merges in progress are given up (their partial outputs freed in this
 * txn: the one merge reads each input update once, where finishing them
 * first and merging their outputs again read the data about twice), and a
 * lone batch whose since lags is recompacted.  While it runs the inputs
 * and the output coexist: at most twice the trace's bytes. */
static int maintain_all(heap_txn *t, pool *p, spine *sp, bool *idle)
{
	bool lag, fin;
	int rc = 0;

	for (uint32_t i = 0; i < sp->nmerges && rc == 0; i++) {
		if (sp->merges[i].partial_id)
			rc = batch_drop(t, sp->merges[i].partial_id);
		free(sp->merges[i].key);
		free(sp->merges[i].val);
	}
	sp->nmerges = 0;
	if (rc == 0)
		rc = lagging(t, sp, &lag);
	if (rc == 0 && (sp->nbatches >= 2 || (sp->nbatches == 1 && lag))) {
		spine_merge *nm = realloc(sp->merges, sizeof *nm);

		if (nm == NULL)
			return AH_ENOMEM;
		sp->merges = nm;
		memset(nm, 0, sizeof *nm);
		nm->count = sp->nbatches;
		nm->since = sp->since;
		sp->nmerges = 1;
		rc = run_merge(t, p, sp, 0, 0, &fin);
	}
	if (rc == 0)
		*idle = true;
	return rc;
}

/* Fueled maintenance with a merge thread: the merges the policy asks for
 * are started, not run, and the fuel is credit for the thread (run here
 * only past its slack, as at a push). */
static int maintain_bg(heap_txn *t, pool *p, spine *sp, uint64_t fuel,
                       uint64_t quantum, uint64_t avoid, bool *idle)
{
	int rc = spine_tidy(t, p, sp, quantum, true);

	if (rc == 0 && sp->nmerges == 0) {
		bool lag;
		if ((rc = lagging(t, sp, &lag)))
			return rc;
		if (sp->nbatches < 2 && !(sp->nbatches == 1 && lag)) {
			*idle = true;
			return 0;
		}
		rc = start_merge(t, p, sp, 0, sp->nbatches, quantum, true);
	}
	/* at most a quantum a call: a thread that makes no progress (failing
	 * slices) still sees its merges run here after SPINE_BG_SLACK calls */
	if (rc == 0)
		rc = spend(t, p, sp, fuel < quantum ? fuel : quantum, quantum, true,
		           avoid);
	return rc;
}

int spine_maintain(heap_txn *t, pool *p, spine *sp, uint64_t fuel,
                   uint64_t quantum, bool bg, uint64_t avoid, bool *idle)
{
	uint64_t used = 0;
	int rc;
	*idle = false;
	if (fuel == 0)
		return maintain_all(t, p, sp, idle);
	if (!quantum)
		quantum = SPINE_MERGE_QUANTUM;
	if (bg)
		return maintain_bg(t, p, sp, fuel, quantum, avoid, idle);
	if ((rc = spine_tidy(t, p, sp, quantum, false)))
		return rc;
	for (;;) {
		if (fuel && used >= fuel)
			return 0;
		if (sp->nmerges > 0) {
			spine_merge *m = &sp->merges[0];
			uint64_t before = m->done;
			uint64_t size = merge_size(sp, m);
			bool fin;
			rc = run_merge(t, p, sp, 0, fuel ? fuel - used : 0, &fin);
			if (rc)
				return rc;
			used += fin ? (size - before) : (sp->merges[0].done - before);
			if (fin && (rc = spine_tidy(t, p, sp, quantum, false)))
				return rc;
			continue;
		}
		bool lag;
		if ((rc = lagging(t, sp, &lag)))
			return rc;
		if (sp->nbatches >= 2 || (sp->nbatches == 1 && lag)) {
			if ((rc = start_merge(t, p, sp, 0, sp->nbatches, quantum,
			                      false)))
				return rc;
			continue;
		}
		*idle = true;
		return 0;
	}
}

int spine_check(heap_txn *t, const spine *sp, char *msg, size_t msglen)
{
	int rc = 0;
	frontier prev_upper = frontier_of(0);
	msg[0] = 0;
	if (!frontier_le(sp->since, sp->upper)) {
		snprintf(msg, msglen, "since %llu beyond upper %llu",
		         (unsigned long long)frontier_time(sp->since),
		         (unsigned long long)frontier_time(sp->upper));
		return CORRUPT("spine: since beyond upper");
	}
	for (uint32_t i = 0; i < sp->nbatches && !rc; i++) {
		batch *b;
		if ((rc = batch_load_listed(t, sp->batches[i].id, &b))) {
			snprintf(msg, msglen, "batch %llu: cannot load (%s)",
			         (unsigned long long)sp->batches[i].id, ah_err_name(rc));
			return rc;
		}
		if (i > 0 && !frontier_eq(b->desc.lower, prev_upper))
			snprintf(msg, msglen, "batch %llu: lower %llu != previous upper %llu",
			         (unsigned long long)b->id,
			         (unsigned long long)frontier_time(b->desc.lower),
			         (unsigned long long)frontier_time(prev_upper));
		else if (!frontier_le(b->desc.upper, sp->upper) ||
		         !frontier_le(b->desc.lower, b->desc.upper))
			snprintf(msg, msglen, "batch %llu: [%llu, %llu) outside upper %llu",
			         (unsigned long long)b->id,
			         (unsigned long long)frontier_time(b->desc.lower),
			         (unsigned long long)frontier_time(b->desc.upper),
			         (unsigned long long)frontier_time(sp->upper));
		else if (b->updates == 0 || b->updates != sp->batches[i].updates)
			snprintf(msg, msglen, "batch %llu: %llu updates, spine says %llu",
			         (unsigned long long)b->id, (unsigned long long)b->updates,
			         (unsigned long long)sp->batches[i].updates);
		prev_upper = b->desc.upper;
		batch_free(b);
		if (msg[0])
			rc = CORRUPT("spine check");
	}
	for (uint32_t i = 0; i < sp->nmerges && !rc; i++)
		for (uint32_t j = 0; j < sp->merges[i].count && !rc; j++)
			if (in_merge(sp, sp->merges[i].first + j) != (int)i) {
				snprintf(msg, msglen, "merge %u overlaps another", i);
				rc = CORRUPT("spine: merges overlap");
			}
	return rc;
}

int spine_drop_all(heap_txn *t, spine *sp)
{
	int rc = 0;
	for (uint32_t i = 0; i < sp->nmerges && !rc; i++)
		if (sp->merges[i].partial_id)
			rc = batch_drop(t, sp->merges[i].partial_id);
	for (uint32_t i = 0; i < sp->nbatches && !rc; i++)
		rc = batch_drop(t, sp->batches[i].id);
	return rc;
}
