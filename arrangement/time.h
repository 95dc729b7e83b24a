/*
 * arrangement/time.h - logical times and frontiers: the one seam every
 * comparison of times goes through (differential dataflow's Timestamp,
 * PartialOrder, Lattice and Antichain).
 *
 * Today a time is a u64 and times are totally ordered, so a frontier (an
 * antichain: the times not yet complete, or the times reads may ask
 * about) is one time, and "t is beyond f" is f <= t.  Code above this file
 * never compares times or frontiers with < or ==: it asks these functions,
 * in differential dataflow's words, so that product timestamps (a partial
 * order, (outer, inner) times of nested scopes) change this file and the
 * record layouts, not every merge, cursor and check:
 *   - atime becomes a struct of coordinates; time_le a partial order;
 *     time_cmp stays a total order that extends it (sorting, B1);
 *   - time_join (the least upper bound) is what advance_by and a join's
 *     output time use;
 *   - frontier becomes an antichain of several times: frontier_le and
 *     time_beyond quantify over its elements, and the records store its
 *     length and elements (today one u64).
 * This file must never do I/O or allocate.
 */
#ifndef ARRANGEMENT_TIME_H
#define ARRANGEMENT_TIME_H

#include <stdbool.h>
#include <stdint.h>

/* A logical time: the caller's u64 (ah_update.time). */
typedef uint64_t atime;

/* A frontier: the least elements of a set of times that is closed upward.
 * One element while times are totally ordered. */
typedef struct frontier {
	atime t;
} frontier;

/* The partial order of times (total today). */
static inline bool time_le(atime a, atime b)
{
	return a <= b;
}

static inline bool time_lt(atime a, atime b)
{
	return a < b;
}

/* A total order consistent with time_le: for sorting (-1, 0, 1). */
static inline int time_cmp(atime a, atime b)
{
	return (a > b) - (a < b);
}

/* The least upper bound of two times. */
static inline atime time_join(atime a, atime b)
{
	return a > b ? a : b;
}

static inline frontier frontier_of(atime t)
{
	return (frontier){ t };
}

/* The frontier's one element, for records and messages (the seam: an
 * antichain would store all of them). */
static inline atime frontier_time(frontier f)
{
	return f.t;
}

/* t is beyond f (some element of f is <= t): t is not before f. */
static inline bool time_beyond(atime t, frontier f)
{
	return time_le(f.t, t);
}

/* t is before f: not beyond any element (a time < upper is complete). */
static inline bool time_before(atime t, frontier f)
{
	return !time_beyond(t, f);
}

/* a <= b: every time beyond b is beyond a (since never passes upper). */
static inline bool frontier_le(frontier a, frontier b)
{
	return time_le(a.t, b.t);
}

static inline bool frontier_eq(frontier a, frontier b)
{
	return a.t == b.t;
}

/* Differential dataflow's advance_by: the time that reads beyond `since`
 * cannot tell from t (t joined with since's element). */
static inline atime time_advance_by(atime t, frontier since)
{
	return time_join(t, since.t);
}

#endif /* ARRANGEMENT_TIME_H */
