/*
 * tests/fault/test_corrupt_sweep.c - the corruption sweep for LMDB pages
 * (issue "Nothing acknowledged is ever lost", items 8, 9): every class of
 * page of a small real heap gets bytes flipped at fixed positions, and each
 * damaged copy is read in-process (a forked child under alarm) and through
 * ah-dump.  Every answer must be an error or exactly the undamaged heap's.
 * tests/fault/test_corrupt_pages.c holds the targeted cases; the layout is
 * found with tests/fault/lmdb_pages.h on the undamaged file.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "lmdb_pages.h"
#include "tl_dir.h"
#include "tl_file.h"
#include "tl_heap.h"
#include "tl_run.h"

/* A heap of NARR arrangements (long names, so the arr tree has branch
 * pages; every 20th with 2500-byte keys, so its batch records and fences
 * are overflow values; merges suspended by a tiny merge quantum) and two
 * sources, over NCOMMITS commits; the file as of the previous commit is
 * kept.  Every page of the current file is classified (lmdb_pages.h) and
 * for each class a few pages get bytes flipped at fixed positions: page
 * header fields, node offsets, node headers, key bytes, child and overflow
 * page numbers, IDLs, MDB_db records, meta fields.  For each damaged copy
 * a forked child (alarm: a hang fails) runs ah_open, ah_verify,
 * ah_arrangement_next over all, ah_arrangement_info_get, ah_source_next
 * and ah_source_get, ah_batch_foreach and a cursor read of every
 * arrangement; then ah-dump runs summary, arrangements, batches, verify and
 * read.  Each answer must be an error or exactly the undamaged heap's
 * (what a call delivered before its error must be a prefix of it); never
 * a wrong answer, a hang or a signal.  `ah-dump verify` must exit 1 when
 * any call gave an error and whenever the damage is in a live page; a
 * flip in a dead page (free, past the last page) must change nothing.
 *
 * The one known limit: LMDB 0.9 picks the current commit by the larger
 * txnid of the two meta pages and has no checksum, so a txnid flip that
 * makes the older meta look newest is a silent rollback.  For txnid
 * positions the answers may all be exactly the previous commit's, and
 * verify may pass (ARCHITECTURE.md §4); nowhere else.
 *
 * Key flips set a high bit (0x80 of a name's first byte, 0x40 of a u64
 * key's top byte), so the key grows past its successor: they are not taken
 * from a page's last node (the table's last key could grow unseen: a key
 * that keeps the order is the walker's documented limit). mp_pad and
 * mm_mapsize are not flipped: LMDB ignores them (mp_pad is stale on pages
 * reused under MDB_WRITEMAP), so no check can or need see them.
 * Positions are fixed; nothing is random.
 */

#define NARR 80
#define NCOMMITS 4
#define MAXB 16
#define MAXI 128
#define NSRC 2

typedef struct answers {
	char names[NARR][AH_NAME_MAX + 1];
	ah_arrangement_info info[NARR];
	uint32_t nb[NARR], ni[NARR];
	ah_batch_info b[NARR][MAXB];
	uint64_t item[NARR][MAXI]; /* one hash per (key, val): bytes, times */
	char src[NSRC][AH_NAME_MAX + 1];
	uint64_t srcpos[NSRC];
	char *dump[8];             /* ah-dump outputs, as commands[] */
	int dump_rc[8];
} answers;

static const char *const commands[] = { "", "arrangements", "batches %s",
                                        "read %s", "verify" };
#define NCMD (sizeof commands / sizeof *commands)
#define CMD_VERIFY (NCMD - 1)

static void sweep_arr_name(char *buf, int a)
{
	snprintf(buf, AH_NAME_MAX + 1, "arrangement-%03d-with-a-long-name-to-"
	         "fill-leaf-pages-%03d", a, a);
}

static void sweep_commit(ah_heap *h, int c)
{
	static char big[2600];
	char keys[20][2600], name[AH_NAME_MAX + 1], pos[32];
	ah_update u[20];
	ah_txn *t;

	memset(big, 'k', sizeof big);
	cr_assert_eq(ah_txn_begin(h, 0, &t), 0);
	for (int a = 0; a < NARR; a++) {
		int n = a % 7 == 3 ? 20 : 6;

		sweep_arr_name(name, a);
		if (c == 0)
			cr_assert_eq(ah_arrangement_create(t, name), 0);
		if (c == NCOMMITS - 1 && a % 2)
			continue; /* the last commit changes half of them */
		for (int i = 0; i < n; i++) {
			size_t kl;

			if (a % 20 == 5) {
				memcpy(keys[i], big, 2500);
				kl = 2500 + (size_t)snprintf(keys[i] + 2500, 32, "%04d",
				                             (i * 7 + c) % 50);
			} else {
				kl = (size_t)snprintf(keys[i], sizeof keys[i], "key-%04d",
				                      (i * 7 + c * 3 + a) % 50);
			}
			u[i] = (ah_update){ keys[i], kl, "val", 3, (uint64_t)c,
			                    (i % 3) ? 1 : -1 };
		}
		cr_assert_eq(ah_append(t, name, (uint64_t)c, (uint64_t)c + 1, u,
		                       (size_t)n), 0);
	}
	snprintf(pos, sizeof pos, "pos-%d", c);
	cr_assert_eq(ah_source_put(t, "src-a", pos, strlen(pos)), 0);
	if (c == 0)
		cr_assert_eq(ah_source_put(t, "src-b", "b", 1), 0);
	cr_assert_eq(ah_txn_commit(t), 0);
}

/* base: NCOMMITS commits; prev: a copy of it after NCOMMITS - 1. */
static void sweep_heaps(const char *base, const char *prev)
{
	ah_open_opts o = tl_opts(AH_OPEN_CREATE, 16 * TL_MiB, 16);
	ah_heap *h;

	cr_assert_eq(ah_open(base, &o, &h), 0);
	for (int c = 0; c < NCOMMITS - 1; c++)
		sweep_commit(h, c);
	cr_assert_eq(ah_close(h), 0);
	cr_assert_eq(tl_copy(base, prev), 0);
	cr_assert_eq(ah_open(base, &o, &h), 0);
	sweep_commit(h, NCOMMITS - 1);
	cr_assert_eq(ah_close(h), 0);
}

static uint64_t item_hash(ah_cursor *c, int *rc)
{
	XXH3_state_t *st = XXH3_createState();
	const void *p;
	size_t len;
	uint64_t t, h;
	int64_t d;

	XXH3_64bits_reset(st);
	if ((*rc = ah_cursor_key(c, &p, &len)) == 0) {
		XXH3_64bits_update(st, p, len);
		*rc = ah_cursor_val(c, &p, &len);
	}
	if (*rc == 0) {
		XXH3_64bits_update(st, &len, sizeof len);
		XXH3_64bits_update(st, p, len);
		while ((*rc = ah_cursor_time_next(c, &t, &d)) == 1) {
			XXH3_64bits_update(st, &t, sizeof t);
			XXH3_64bits_update(st, &d, sizeof d);
		}
	}
	h = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	return h;
}

/* Reads arrangement name to the end into items; returns the last rc. */
static int read_items(ah_txn *t, const char *name, uint64_t *items,
                      uint32_t *n)
{
	ah_cursor *c = NULL;
	int rc = ah_cursor_open(t, name, &c);

	*n = 0;
	while (rc == 0 && ah_cursor_key_valid(c)) {
		while (rc == 0 && ah_cursor_val_valid(c) && *n < MAXI) {
			uint64_t h = item_hash(c, &rc);

			if (rc < 0)
				break;
			items[(*n)++] = h;
			rc = ah_cursor_step_val(c);
		}
		if (rc == 0)
			rc = ah_cursor_step_key(c);
	}
	/* key_valid is 0 after an error too: a step at the end says which */
	if (rc == 0)
		rc = ah_cursor_step_key(c);
	ah_cursor_close(c);
	return rc < 0 ? rc : 0;
}

struct bcollect {
	ah_batch_info *b;
	uint32_t n;
};

static int collect_batch(const ah_batch_info *b, void *user)
{
	struct bcollect *c = user;

	if (c->n == MAXB)
		return AH_ELIMIT;
	c->b[c->n++] = *b;
	return 0;
}

/* The undamaged answers of heap path, in-process and through ah-dump. */
static void answers_of(const char *path, answers *a)
{
	ah_open_opts o = tl_opts(AH_OPEN_RDONLY, 0, 0);
	char name[AH_NAME_MAX + 1];
	ah_heap *h;
	ah_txn *t;
	const void *pos;
	size_t len;
	int i = 0;

	memset(a, 0, sizeof *a);
	cr_assert_eq(ah_open(path, &o, &h), 0);
	cr_assert_eq(ah_txn_begin(h, AH_TXN_RDONLY, &t), 0);
	for (int rc = ah_arrangement_next(t, NULL, name); rc != AH_ENOTFOUND;
	     rc = ah_arrangement_next(t, a->names[i - 1], name)) {
		struct bcollect bc = { a->b[i], 0 };

		cr_assert_eq(rc, 0);
		cr_assert_lt(i, NARR);
		strcpy(a->names[i], name);
		cr_assert_eq(ah_arrangement_info_get(t, name, &a->info[i]), 0);
		cr_assert_eq(ah_batch_foreach(t, name, collect_batch, &bc), 0);
		a->nb[i] = bc.n;
		cr_assert_eq(read_items(t, name, a->item[i], &a->ni[i]), 0);
		cr_assert_lt(a->ni[i], MAXI);
		i++;
	}
	cr_assert_eq(i, NARR);
	for (int s = 0; s < NSRC; s++) {
		cr_assert_eq(ah_source_next(t, s ? a->src[s - 1] : NULL, a->src[s]), 0);
		cr_assert_eq(ah_source_get(t, a->src[s], &pos, &len), 0);
		a->srcpos[s] = XXH3_64bits(pos, len);
	}
	ah_txn_abort(t);
	cr_assert_eq(ah_close(h), 0);
}

/* Runs `ah-dump path args` (killed after 20 s: a hang); returns its exit
 * status (137: killed, -1: another signal), output (stdout and stderr,
 * malloc'd) in *out.  No Criterion calls. */
static int run_dump(const char *path, const char *args, char **out)
{
	char cmd[1024];
	size_t n = 0, cap = 1 << 16, got;
	char *buf = malloc(cap);
	FILE *p;
	int st;

	snprintf(cmd, sizeof cmd, "timeout -s KILL 20 '%s/ah-dump' '%s' %s 2>&1",
	         tl_build(), path, args);
	if (buf == NULL || (p = popen(cmd, "r")) == NULL)
		return -2;
	while ((got = fread(buf + n, 1, cap - 1 - n, p)) > 0)
		if ((n += got) + 1 == cap && (buf = realloc(buf, cap *= 2)) == NULL)
			return -2;
	buf[n] = 0;
	st = pclose(p);
	*out = buf;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The output as compared: without the summary's "file size" line (blocks
 * allocated differ between copies) and, for txnid flips, "last commit"
 * (it prints the txnid itself). */
static void normalize(char *out, bool txnid)
{
	char *r = out, *w = out;

	while (*r) {
		char *eol = strchr(r, '\n');
		size_t len = eol ? (size_t)(eol - r + 1) : strlen(r);

		if (strncmp(r, "file size ", 10) != 0 &&
		    !(txnid && strncmp(r, "last commit ", 12) == 0)) {
			memmove(w, r, len);
			w += len;
		}
		r += len;
	}
	*w = 0;
}

static void dump_args(size_t c, char *args, size_t len)
{
	char sel[AH_NAME_MAX + 1];

	sweep_arr_name(sel, 25);
	snprintf(args, len, commands[c], sel);
}

/* ah-dump's answers on the heap at from, run on a copy at work (the
 * summary prints the path). */
static void dump_answers(const char *from, const char *work, answers *a)
{
	char args[200], lock[200];

	snprintf(lock, sizeof lock, "%s-lock", work);
	cr_assert_eq(tl_copy(from, work), 0);
	unlink(lock);
	for (size_t c = 0; c < NCMD; c++) {
		dump_args(c, args, sizeof args);
		a->dump_rc[c] = run_dump(work, args, &a->dump[c]);
		cr_assert_eq(a->dump_rc[c], 0, "ah-dump %s: %s", args, a->dump[c]);
	}
	unlink(lock);
}

/* ------------------------------------------------ one damaged copy */

enum { M_CUR = 1, M_PREV = 2 }; /* which undamaged answer a call matched */

/* What the child found, through a pipe. */
typedef struct outcome {
	int open_rc, verify_rc;
	uint64_t problems;    /* ah_verify's */
	int errors;           /* calls that returned an error */
	unsigned mask;        /* AND of the successful calls' M_* */
	int wrong;            /* calls whose answer matched neither */
	char what[160];       /* the first wrong one */
} outcome;

static const answers *exp_cur, *exp_prev;

static void judge(outcome *o, const char *call, unsigned m)
{
	o->mask &= m;
	if (m == 0 && o->wrong++ == 0)
		snprintf(o->what, sizeof o->what, "%s", call);
}

/* A call that ended in an error after delivering n items: they must be a
 * prefix of one of the undamaged answers (cmp(i, which) says if item i
 * equals that answer's). */
static void judge_error(outcome *o, const char *call, unsigned prefix)
{
	o->errors++;
	if (prefix == 0 && o->wrong++ == 0)
		snprintf(o->what, sizeof o->what, "%s (before its error)", call);
}

static unsigned names_match(char (*got)[AH_NAME_MAX + 1], int n, bool whole)
{
	unsigned m = 0;

	for (int w = 0; w < 2; w++) {
		const answers *a = w ? exp_prev : exp_cur;
		bool same = !whole || n == NARR;

		for (int i = 0; i < n && same; i++)
			same = strcmp(got[i], a->names[i]) == 0;
		m |= same ? (w ? M_PREV : M_CUR) : 0;
	}
	return m;
}

static void child_names(ah_txn *t, outcome *o)
{
	static char got[NARR + 1][AH_NAME_MAX + 1];
	int n = 0, rc;

	while (n <= NARR && (rc = ah_arrangement_next(t, n ? got[n - 1] : NULL,
	                                              got[n])) == 0)
		n++;
	if (n > NARR)
		judge(o, "ah_arrangement_next: too many", 0);
	else if (rc == AH_ENOTFOUND)
		judge(o, "ah_arrangement_next", names_match(got, n, true));
	else
		judge_error(o, "ah_arrangement_next", names_match(got, n, false));
}

static void child_info(ah_txn *t, outcome *o)
{
	for (int i = 0; i < NARR; i++) {
		ah_arrangement_info in;
		int rc = ah_arrangement_info_get(t, exp_cur->names[i], &in);

		if (rc && rc != AH_ENOTFOUND)
			o->errors++;
		else
			judge(o, "ah_arrangement_info_get",
			      (!rc && !memcmp(&in, &exp_cur->info[i], sizeof in) ? M_CUR : 0) |
			      (!rc && !memcmp(&in, &exp_prev->info[i], sizeof in) ? M_PREV : 0));
	}
}

static void child_sources(ah_txn *t, outcome *o)
{
	char got[NSRC + 1][AH_NAME_MAX + 1];
	uint64_t pos[NSRC];
	int n = 0, rc;

	while (n <= NSRC && (rc = ah_source_next(t, n ? got[n - 1] : NULL,
	                                         got[n])) == 0) {
		const void *p;
		size_t len;

		if (n < NSRC && ah_source_get(t, got[n], &p, &len) == 0)
			pos[n] = XXH3_64bits(p, len);
		else if (n < NSRC)
			pos[n] = 0, o->errors++;
		n++;
	}
	unsigned m = 0;

	for (int w = 0; w < 2; w++) {
		const answers *a = w ? exp_prev : exp_cur;
		bool same = n <= NSRC && (rc != AH_ENOTFOUND || n == NSRC);

		for (int i = 0; i < n && same; i++)
			same = !strcmp(got[i], a->src[i]) &&
			       (pos[i] == 0 || pos[i] == a->srcpos[i]);
		m |= same ? (w ? M_PREV : M_CUR) : 0;
	}
	if (rc == AH_ENOTFOUND)
		judge(o, "ah_source_next/get", m);
	else
		judge_error(o, "ah_source_next", m);
}

static void child_batches(ah_txn *t, outcome *o)
{
	static ah_batch_info got[MAXB];

	for (int i = 0; i < NARR; i++) {
		struct bcollect bc = { got, 0 };
		int rc = ah_batch_foreach(t, exp_cur->names[i], collect_batch, &bc);
		unsigned m = 0;

		for (int w = 0; w < 2; w++) {
			const answers *a = w ? exp_prev : exp_cur;
			bool same = rc ? bc.n <= a->nb[i] : bc.n == a->nb[i];

			same = same && !memcmp(got, a->b[i], bc.n * sizeof *got);
			m |= same ? (w ? M_PREV : M_CUR) : 0;
		}
		if (rc)
			judge_error(o, "ah_batch_foreach", m);
		else
			judge(o, "ah_batch_foreach", m);
	}
}

static void child_read(ah_txn *t, outcome *o)
{
	static uint64_t got[MAXI];

	for (int i = 0; i < NARR; i++) {
		uint32_t n;
		int rc = read_items(t, exp_cur->names[i], got, &n);
		unsigned m = 0;

		for (int w = 0; w < 2; w++) {
			const answers *a = w ? exp_prev : exp_cur;
			bool same = rc ? n <= a->ni[i] : n == a->ni[i];

			same = same && !memcmp(got, a->item[i], n * sizeof *got);
			m |= same ? (w ? M_PREV : M_CUR) : 0;
		}
		if (rc)
			judge_error(o, "cursor read", m);
		else
			judge(o, "cursor read", m);
	}
}

static int child_problem(const ah_problem *p, void *user)
{
	(void)p;
	++*(uint64_t *)user;
	return 0;
}

/* The forked child: every call in order; the outcome to fd. */
static void child_run(const char *path, int fd)
{
	ah_open_opts oo = tl_opts(AH_OPEN_RDONLY, 0, 0);
	outcome o = { .mask = M_CUR | M_PREV };
	ah_verify_stats vs;
	ah_heap *h = NULL;
	ah_txn *t = NULL;

	o.open_rc = ah_open(path, &oo, &h);
	if (o.open_rc == 0 && (o.open_rc = ah_txn_begin(h, AH_TXN_RDONLY, &t)))
		ah_close(h);
	if (o.open_rc) {
		o.errors++;
	} else {
		o.verify_rc = ah_verify(t, child_problem, &o.problems, &vs);
		o.errors += o.verify_rc != 0;
		child_names(t, &o);
		child_info(t, &o);
		child_sources(t, &o);
		child_batches(t, &o);
		child_read(t, &o);
		ah_txn_abort(t);
		if (ah_close(h) != 0 && o.wrong++ == 0)
			snprintf(o.what, sizeof o.what, "ah_close");
	}
	_exit(write(fd, &o, sizeof o) == sizeof o ? 0 : 3);
}

/* ------------------------------------------------- classes and positions */

enum { K_LIVE, K_TXNID, K_OLD_META, K_DEAD };
static const char *const kind_names[] = { "live", "txnid (known limit)",
                                          "older meta", "dead" };

typedef struct flip {
	uint64_t pg;
	uint32_t at;        /* offset in the page (may pass its end: overflow) */
	uint8_t mask;
	const char *field;
} flip;

typedef struct sclass {
	char name[40];
	int kind;
	int n;
	flip f[96];
	int errors, right, limit, failed; /* results */
} sclass;

static void add(sclass *c, uint64_t pg, uint32_t at, uint8_t mask,
                const char *field)
{
	cr_assert_lt(c->n, 96, "%s: too many positions", c->name);
	c->f[c->n++] = (flip){ pg, at, mask, field };
}

/* Trees whose values are arrheap records (the lead's checks). */
static bool record_tree(int t)
{
	return t == LP_ARR || t == LP_BATCH || t == LP_SOURCE;
}

static bool intkey_tree(int t)
{
	return t == LP_BATCH || t == LP_CHUNKS || t == LP_FREE;
}

/* The high-bit flip of node i's key (it grows past its successor). */
static void key_flip(sclass *c, const lp_file *f, uint64_t pg, int t,
                     unsigned i, const char *field)
{
	unsigned node = lp_node_off(f, pg, i);

	add(c, pg, node + 8 + (intkey_tree(t) ? 7 : 0), intkey_tree(t) ? 0x40
	                                                                 : 0x80,
	    field);
}

static void header_flips(sclass *c, uint64_t pg, bool branch)
{
	add(c, pg, 0, 0x01, "mp_pgno");
	add(c, pg, 10, branch ? 0x01 : 0x02, "mp_flags (own bit)");
	add(c, pg, 10, branch ? 0x02 : 0x01, "mp_flags (other bit)");
	add(c, pg, 10, 0x10, "mp_flags (P_DIRTY)");
	add(c, pg, 12, 0x02, "mp_lower");
	add(c, pg, 14, 0x02, "mp_upper");
	add(c, pg, 16, 0x02, "node offset 0");
	add(c, pg, 16, 0x01, "node offset 0 (odd)");
}

static void branch_flips(sclass *c, const lp_file *f, uint64_t pg, int t)
{
	unsigned n = lp_nkeys(f, pg), mid = n / 2, node = lp_node_off(f, pg, mid);

	header_flips(c, pg, true);
	add(c, pg, 16 + 2 * mid, 0x02, "node offset mid");
	add(c, pg, lp_node_off(f, pg, 0), 0x01, "child 0 page (low bit)");
	add(c, pg, node, 0x01, "child mid page (low bit)");
	add(c, pg, node + 3, 0x40, "child mid page (bit 30)");
	add(c, pg, node + 4, 0x01, "child mid page (bit 32)");
	add(c, pg, node + 6, 0x01, "key size mid");
	add(c, pg, lp_node_off(f, pg, n - 1), 0x02, "child last page");
	key_flip(c, f, pg, t, mid, "separator mid");
	key_flip(c, f, pg, t, n - 1, "separator last");
}

/* Where node i's value starts (in the page, or its overflow page's
 * offset from pg when F_BIGDATA). */
static uint8_t *value_of(const lp_file *f, uint64_t pg, unsigned i)
{
	uint8_t *node = lp_page_at(f, pg) + lp_node_off(f, pg, i);
	uint8_t *v = node + 8 + lp_get16(node + 6);

	return lp_get16(node + 4) & LP_BIGDATA
	               ? lp_page_at(f, lp_get64(v)) + 16 : v;
}

static void at_ptr(sclass *c, const lp_file *f, const uint8_t *p, uint8_t mask,
                   const char *field)
{
	uint64_t off = (uint64_t)(p - f->b);

	add(c, off / LP_PSIZE, (uint32_t)(off % LP_PSIZE), mask, field);
}

/* LMDB's structure in a leaf: header, node headers, keys, and the values
 * that are LMDB's own (MDB_db records, IDLs, overflow page numbers). */
static void leaf_flips(sclass *c, const lp_file *f, uint64_t pg, int t)
{
	unsigned n = lp_nkeys(f, pg), mid = n / 2, node = lp_node_off(f, pg, mid);
	const uint8_t *p = lp_page_at(f, pg);

	header_flips(c, pg, false);
	add(c, pg, 16 + 2 * mid, 0x02, "node offset mid");
	/* An arrheap record 1 byte shorter or longer whose node keeps its
	 * even size is for the record's own check: record_classes. */
	if (!record_tree(t) || lp_get16(p + node + 4) & LP_BIGDATA)
		add(c, pg, node, 0x01, "data size mid (bit 0)");
	add(c, pg, node + 1, 0x10, "data size mid (bit 12)");
	add(c, pg, node + 2, 0x01, "data size mid (bit 16)");
	add(c, pg, node + 4, 0x01, "node flags mid (F_BIGDATA)");
	add(c, pg, node + 4, 0x04, "node flags mid (F_DUPDATA)");
	add(c, pg, node + 6, 0x01, "key size mid");
	if (n >= 2)
		key_flip(c, f, pg, t, 0, "key 0");
	if (n >= 3 && mid + 1 < n)
		key_flip(c, f, pg, t, mid, "key mid");
	for (unsigned i = 0; i < n; i++) {
		const uint8_t *nd = p + lp_node_off(f, pg, i);
		const uint8_t *v = nd + 8 + lp_get16(nd + 6);

		if (t == LP_MAIN) {
			at_ptr(c, f, v + 4, 0x08, "MDB_db md_flags");
			at_ptr(c, f, v + 6, 0x01, "MDB_db md_depth");
			at_ptr(c, f, v + 16, 0x01, "MDB_db md_leaf_pages");
			at_ptr(c, f, v + 32, 0x01, "MDB_db md_entries");
			at_ptr(c, f, v + 40, 0x01, "MDB_db md_root");
			if (i == 0)
				at_ptr(c, f, v, 0x01, "MDB_db md_pad");
		} else if (lp_get16(nd + 4) & LP_BIGDATA && (i == 0 || i == mid)) {
			at_ptr(c, f, v, 0x01, "overflow page (bit 0)");
			at_ptr(c, f, v + 5, 0x40, "overflow page (bit 46)");
		}
		if (t == LP_FREE && i == 0) {
			const uint8_t *idl = value_of(f, pg, i);

			at_ptr(c, f, idl, 0x01, "IDL count");
			at_ptr(c, f, idl + 8, 0x01, "IDL first page");
			at_ptr(c, f, idl + 8 * lp_get64(idl), 0x02, "IDL last page");
		}
	}
}

static void overflow_flips(sclass *c, uint64_t pg)
{
	add(c, pg, 0, 0x01, "mp_pgno");
	add(c, pg, 10, 0x04, "mp_flags (P_OVERFLOW)");
	add(c, pg, 10, 0x01, "mp_flags (P_BRANCH)");
	add(c, pg, 12, 0x01, "mp_pages (bit 0)");
	add(c, pg, 12, 0x02, "mp_pages (bit 1)");
	add(c, pg, 14, 0x01, "mp_pages (bit 16)");
}

/* Meta fields; txnid ones go to the txnid class. */
static void meta_flips(sclass *c, sclass *tx, uint64_t pg)
{
	static const struct { uint32_t at; uint8_t mask; const char *field; } m[] = {
		{ 0, 0x01, "mp_pgno" }, { 10, 0x08, "mp_flags (P_META)" },
		{ 10, 0x01, "mp_flags (P_BRANCH)" }, { 12, 0x01, "mp_lower" },
		{ 16, 0x01, "mm_magic" }, { 20, 0x02, "mm_version" },
		{ 24, 0x01, "mm_address" },
		{ 40, 0x01, "FREE md_pad (page size)" }, { 44, 0x02, "FREE md_flags" },
		{ 46, 0x01, "FREE md_depth" }, { 48, 0x01, "FREE md_branch_pages" },
		{ 56, 0x01, "FREE md_leaf_pages" }, { 64, 0x01, "FREE md_overflow" },
		{ 72, 0x01, "FREE md_entries" }, { 80, 0x01, "FREE md_root" },
		{ 85, 0x40, "FREE md_root (bit 46)" },
		{ 88, 0x01, "MAIN md_pad" }, { 92, 0x02, "MAIN md_flags" },
		{ 94, 0x01, "MAIN md_depth" }, { 104, 0x01, "MAIN md_leaf_pages" },
		{ 120, 0x01, "MAIN md_entries" }, { 128, 0x01, "MAIN md_root" },
		{ 133, 0x40, "MAIN md_root (bit 46)" },
		{ 136, 0x01, "mm_last_pg (bit 0)" }, { 137, 0x01, "mm_last_pg (bit 8)" },
		{ 141, 0x40, "mm_last_pg (bit 46)" },
	};
	static const struct { uint32_t at; uint8_t mask; const char *field; } x[] = {
		{ 144, 0x01, "mm_txnid (bit 0)" }, { 144, 0x02, "mm_txnid (bit 1)" },
		{ 144, 0x04, "mm_txnid (bit 2)" }, { 150, 0x40, "mm_txnid (bit 54)" },
	};

	for (size_t i = 0; i < sizeof m / sizeof *m; i++)
		add(c, pg, m[i].at, m[i].mask, m[i].field);
	for (size_t i = 0; i < sizeof x / sizeof *x; i++)
		add(tx, pg, x[i].at, x[i].mask, x[i].field);
}

/* Up to two pages of a kind and tree: the first and the last. */
static int pages_of(const lp_file *f, int kind, int tree, uint64_t out[2])
{
	int n = 0;

	for (uint64_t pg = 0; pg < f->npages; pg++)
		if (f->pg[pg].kind == kind &&
		    (tree < 0 || f->pg[pg].tree == tree)) {
			if (n < 2)
				out[n++] = pg;
			else
				out[1] = pg;
		}
	return n;
}

static sclass *new_class(sclass *cs, int *nc, int kind, const char *fmt,
                         const char *arg)
{
	sclass *c = &cs[(*nc)++];

	memset(c, 0, sizeof *c);
	snprintf(c->name, sizeof c->name, fmt, arg);
	c->kind = kind;
	return c;
}

/* The classes of LMDB's structure (the enabled sweep). */
static int lmdb_classes(const lp_file *f, sclass *cs)
{
	uint64_t pg[2];
	int nc = 0, k;
	sclass *c, *tx;

	c = new_class(cs, &nc, K_LIVE, "meta (current)%s", "");
	tx = new_class(cs, &nc, K_TXNID, "txnid (current meta)%s", "");
	meta_flips(c, tx, f->cur);
	c = new_class(cs, &nc, K_OLD_META, "meta (older)%s", "");
	tx = new_class(cs, &nc, K_TXNID, "txnid (older meta)%s", "");
	meta_flips(c, tx, f->cur ^ 1);
	for (int t = 0; t < LP_NTREES; t++) {
		if ((k = pages_of(f, LP_K_BRANCH, t, pg)) > 0) {
			c = new_class(cs, &nc, K_LIVE, "%s branch", lp_tree_names[t]);
			for (int i = 0; i < k; i++)
				branch_flips(c, f, pg[i], t);
		}
		if ((k = pages_of(f, LP_K_LEAF, t, pg)) > 0) {
			c = new_class(cs, &nc, K_LIVE, "%s leaf", lp_tree_names[t]);
			for (int i = 0; i < k; i++)
				leaf_flips(c, f, pg[i], t);
		}
	}
	for (int t = 0; t < LP_NTREES; t++)
		if ((k = pages_of(f, LP_K_OV_HEAD, t, pg)) > 0) {
			c = new_class(cs, &nc, K_LIVE, "%s overflow head",
			              t == LP_CHUNKS ? "chunk" : lp_tree_names[t]);
			for (int i = 0; i < k; i++)
				overflow_flips(c, pg[i]);
		}
	c = new_class(cs, &nc, K_DEAD, "free page%s", "");
	for (int i = 0, k2 = pages_of(f, LP_K_FREE, -1, pg); i < k2; i++) {
		add(c, pg[i], 0, 0x01, "page header");
		add(c, pg[i], 12, 0x02, "mp_lower");
		add(c, pg[i], 2000, 0x10, "middle");
	}
	c = new_class(cs, &nc, K_DEAD, "past the last page%s", "");
	add(c, f->npages, 0, 0x01, "page header");
	add(c, f->npages + 3, 100, 0x80, "a byte");
	return nc;
}

/* ------------------------------------------------------------- driver */

typedef struct sweep {
	tl_dir d;
	char base[160], prev[160], work[160], lock[170];
	lp_file f;
	answers cur, old;
	double secs;
} sweep;

/* The answers of one damaged copy: the child's outcome, ah-dump's. */
static void damaged_answers(sweep *s, outcome *o, int rc[NCMD], char *out[NCMD])
{
	char args[200];
	int fds[2], st;
	pid_t pid;

	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(fds[0]);
		alarm(30);
		child_run(s->work, fds[1]);
	}
	close(fds[1]);
	memset(o, 0, sizeof *o);
	st = (int)read(fds[0], o, sizeof *o);
	close(fds[0]);
	o->open_rc = st == sizeof *o ? o->open_rc : INT32_MIN;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	o->verify_rc = WIFEXITED(st) && WEXITSTATUS(st) == 0 ? o->verify_rc
	                                                      : INT32_MIN;
	if (o->verify_rc == INT32_MIN || o->open_rc == INT32_MIN)
		snprintf(o->what, sizeof o->what, "the child %s %d",
		         WIFSIGNALED(st) ? "died of signal" : "exited",
		         WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	unlink(s->lock);
	for (size_t c = 0; c < NCMD; c++) {
		dump_args(c, args, sizeof args);
		rc[c] = run_dump(s->work, args, &out[c]);
	}
	unlink(s->lock);
}

static unsigned dump_match(const sweep *s, size_t c, char *got, bool txnid)
{
	char *cur = strdup(s->cur.dump[c]), *old = strdup(s->old.dump[c]);
	unsigned m;

	normalize(got, txnid);
	normalize(cur, txnid);
	normalize(old, txnid);
	m = (!strcmp(got, cur) ? M_CUR : 0) | (!strcmp(got, old) ? M_PREV : 0);
	free(cur);
	free(old);
	return m;
}

#define FAIL_IF(cond, ...)                                                     \
	do {                                                                   \
		if (cond) {                                                    \
			snprintf(why, whylen, __VA_ARGS__);                    \
			goto out;                                              \
		}                                                              \
	} while (0)

/* Damages one position, runs everything, restores it; returns false and
 * says why (into why) when an answer breaks the rules. */
static bool run_flip(sweep *s, sclass *c, const flip *fl, char *why,
                     size_t whylen)
{
	uint64_t off = fl->pg * LP_PSIZE + fl->at;
	bool txnid = c->kind == K_TXNID, found, ok = false;
	char *out[NCMD] = { 0 }, args[200];
	int rc[NCMD], errors, vrc;
	unsigned mask;
	outcome o;

	cr_assert_eq(tl_try_flip(s->work, off, fl->mask), 0);
	damaged_answers(s, &o, rc, out);
	cr_assert_eq(tl_try_flip(s->work, off, fl->mask), 0);
	FAIL_IF(o.open_rc == INT32_MIN || o.verify_rc == INT32_MIN,
	        "%s (a hang is SIGALRM)", o.what);
	FAIL_IF(o.wrong, "wrong answer from %s (%d wrong)", o.what, o.wrong);
	mask = o.mask;
	errors = o.errors;
	for (size_t k = 0; k < NCMD; k++) {
		dump_args(k, args, sizeof args);
		FAIL_IF(rc[k] != 0 && rc[k] != 1, "ah-dump %s: exit %d (137: hang; "
		        "-1: signal): %.200s", args, rc[k], out[k]);
		if (k != CMD_VERIFY && rc[k] == 0) {
			unsigned m = dump_match(s, k, out[k], txnid);

			FAIL_IF(m == 0, "ah-dump %s: wrong output: %.300s", args,
			        out[k]);
			mask &= m;
		}
		errors += k != CMD_VERIFY && rc[k] == 1;
	}
	vrc = rc[CMD_VERIFY];
	found = o.open_rc || o.verify_rc || o.problems;
	FAIL_IF(mask == 0, "some answers are the current commit's, others the "
	        "previous one's");
	FAIL_IF(!(mask & M_CUR) && !txnid, "the previous commit's answers "
	        "outside the known limit");
	FAIL_IF(errors && !(vrc == 1 && found), "%d calls failed, but ah-dump "
	        "verify exits %d, ah_verify found %llu problems", errors, vrc,
	        (unsigned long long)o.problems);
	FAIL_IF(c->kind == K_LIVE && !(vrc == 1 && found), "damage in a live "
	        "page, but ah-dump verify exits %d, ah_verify found %llu problems",
	        vrc, (unsigned long long)o.problems);
	FAIL_IF(c->kind == K_DEAD && (errors || !(mask & M_CUR) || vrc || found),
	        "damage in a dead page changed something (%d errors, verify %d)",
	        errors, vrc);
	if (errors)
		c->errors++;
	else if (!(mask & M_CUR) || (txnid && vrc == 0))
		c->limit++;
	else
		c->right++;
	ok = true;
out:
	for (size_t k = 0; k < NCMD; k++)
		free(out[k]);
	return ok;
}

static void sweep_setup(sweep *s)
{
	s->d = tl_tmpdir("fault");
	snprintf(s->base, sizeof s->base, "%s/base", s->d.dir);
	snprintf(s->prev, sizeof s->prev, "%s/prev", s->d.dir);
	snprintf(s->work, sizeof s->work, "%s/work", s->d.dir);
	snprintf(s->lock, sizeof s->lock, "%s-lock", s->work);
	sweep_heaps(s->base, s->prev);
	answers_of(s->base, &s->cur);
	answers_of(s->prev, &s->old);
	dump_answers(s->prev, s->work, &s->old);
	dump_answers(s->base, s->work, &s->cur);
	exp_cur = &s->cur;
	exp_prev = &s->old;
	cr_assert_eq(lp_load(s->base, &s->f), 0);
	cr_assert_eq(tl_copy(s->base, s->work), 0);
}

static void sweep_run(sweep *s, sclass *cs, int nc)
{
	struct timespec t0, t1;
	uint64_t size, h0, h1;
	int flips = 0, fails = 0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	h0 = tl_file_hash(s->work, &size);
	for (int i = 0; i < nc; i++)
		for (int k = 0; k < cs[i].n; k++, flips++) {
			const flip *fl = &cs[i].f[k];
			char why[600];

			if (run_flip(s, &cs[i], fl, why, sizeof why))
				continue;
			cs[i].failed++;
			printf("FAILED %s: page %llu +%u ^0x%02x (%s): %s\n",
			       cs[i].name, (unsigned long long)fl->pg, fl->at,
			       fl->mask, fl->field, why);
			fails++;
		}
	h1 = tl_file_hash(s->work, &size);
	cr_assert_eq(h0, h1, "the damaged copy was not restored");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	s->secs = (double)(t1.tv_sec - t0.tv_sec) +
	          (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("corruption sweep: %d flips at fixed positions over %llu pages in "
	       "%.1f s\n", flips, (unsigned long long)s->f.npages, s->secs);
	printf("  %-24s %-20s %5s %6s %5s %5s %6s  %s\n", "class", "kind",
	       "flips", "errors", "right", "limit", "FAILED", "pages");
	for (int i = 0; i < nc; i++) {
		char pages[64] = "";

		for (int k = 0; k < cs[i].n; k++)
			if (k == 0 || cs[i].f[k].pg != cs[i].f[k - 1].pg)
				snprintf(pages + strlen(pages), sizeof pages - strlen(pages),
				         "%s%llu", k ? " " : "",
				         (unsigned long long)cs[i].f[k].pg);
		printf("  %-24s %-20s %5d %6d %5d %5d %6d  %s\n", cs[i].name,
		       kind_names[cs[i].kind], cs[i].n, cs[i].errors, cs[i].right,
		       cs[i].limit, cs[i].failed, pages);
	}
	fflush(stdout);
	cr_assert_eq(fails, 0, "%d of %d flips broke the rules (listed above)",
	             fails, flips);
}

static void sweep_teardown(sweep *s)
{
	for (size_t c = 0; c < NCMD; c++) {
		free(s->cur.dump[c]);
		free(s->old.dump[c]);
	}
	lp_unload(&s->f);
	tl_rmdir(&s->d);
}

/* The heap must have what the classes need. */
static void sweep_shape(const sweep *s)
{
	int merging = 0;

	for (int i = 0; i < NARR; i++)
		merging += s->cur.info[i].merging > 0;
	cr_assert_gt(merging, 0, "no merge in progress");
	cr_assert_geq(s->f.depth[LP_ARR], 2);
	cr_assert_geq(s->f.depth[LP_BATCH], 2);
	cr_assert_geq(s->f.depth[LP_CHUNKS], 2, "chunks depth %llu",
	              (unsigned long long)s->f.depth[LP_CHUNKS]);
}

/* Bytes of arrheap's own records and chunks, which only their checks can
 * judge: record values in the arr, batch and source leaves (and a length
 * one byte off that keeps the node's even size), the arrheap meta record,
 * the last key of the arr and source tables (a name that grows past every
 * other keeps the order), chunk headers and bodies, large records in
 * overflow pages. */
static int record_classes(const lp_file *f, sclass *cs)
{
	uint64_t pg[2];
	int nc = 0, k;
	sclass *c;

	for (int t = 0; t < LP_NTREES; t++) {
		if (!record_tree(t) && t != LP_META)
			continue;
		if ((k = pages_of(f, LP_K_LEAF, t, pg)) == 0)
			continue;
		c = new_class(cs, &nc, K_LIVE, "%s record values", lp_tree_names[t]);
		for (int i = 0; i < k; i++) {
			unsigned n = lp_nkeys(f, pg[i]), mid = n / 2;
			const uint8_t *nd = lp_page_at(f, pg[i]) + lp_node_off(f, pg[i], mid);
			const uint8_t *v = nd + 8 + lp_get16(nd + 6);
			uint32_t len = lp_get16(nd) | (uint32_t)lp_get16(nd + 2) << 16;

			if (lp_get16(nd + 4) & LP_BIGDATA)
				continue;
			add(c, pg[i], lp_node_off(f, pg[i], mid), 0x01, "data size mid");
			at_ptr(c, f, v, 0x01, "value's first byte");
			at_ptr(c, f, v + len - 1, 0x80, "value's last byte");
			if (t == LP_META)
				at_ptr(c, f, v + 48, 0x01, "uuid");
		}
		if (t == LP_ARR || t == LP_SOURCE) {
			uint64_t last = pg[k - 1];

			c = new_class(cs, &nc, K_LIVE, "%s last key", lp_tree_names[t]);
			key_flip(c, f, last, t, lp_nkeys(f, last) - 1, "the table's "
			         "last key");
		}
	}
	for (int t = 0; t < LP_NTREES; t++)
		if ((k = pages_of(f, LP_K_OV_HEAD, t, pg)) > 0) {
			c = new_class(cs, &nc, K_LIVE, "%s overflow body",
			              t == LP_CHUNKS ? "chunk" : lp_tree_names[t]);
			for (int i = 0; i < k; i++) {
				add(c, pg[i], 16, 0x01, "value byte 0");
				add(c, pg[i], 16 + 8, 0x01, "value byte 8");
				add(c, pg[i], 16 + 40, 0x01, "value byte 40");
				if (f->pg[pg[i]].run > 1)
					add(c, pg[i] + 1, 100, 0x01, "second page");
			}
		}
	return nc;
}

Test(corrupt_sweep, lmdb_pages, .timeout = 600)
{
	static sweep s;
	static sclass cs[40];
	int nc;

	sweep_setup(&s);
	sweep_shape(&s);
	nc = lmdb_classes(&s.f, cs);
	sweep_run(&s, cs, nc);
	sweep_teardown(&s);
}

/* Waits for the lead's checksums on every record and per-page chunk
 * checksums (being added on main): until then a flipped byte inside an
 * arrheap record or chunk may still give a wrong answer on this branch.
 * Enable after merging them. */
Test(corrupt_sweep, record_bytes, .timeout = 600)
{
	static sweep s;
	static sclass cs[40];
	int nc;

	sweep_setup(&s);
	nc = record_classes(&s.f, cs);
	sweep_run(&s, cs, nc);
	sweep_teardown(&s);
}
