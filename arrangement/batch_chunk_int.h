/*
 * arrangement/batch_chunk_int.h - private to batch_chunk.c (the chunk
 * view) and batch_check.c (the structural checker): the header checks of a
 * view, which the checker runs on a heap chunk it opened whole itself.
 * The rest of the view (bchunk and its accessors) is batch_int.h.
 *
 * It must never be included outside those two files.
 */
#ifndef ARRANGEMENT_BATCH_CHUNK_INT_H
#define ARRANGEMENT_BATCH_CHUNK_INT_H

#include "arrangement/batch_int.h"

/* batch_chunk.c: the header checks of view c (its hv opened) over body b
 * of body_used bytes; with ends, also key_vals' and val_upds' first and
 * last entries.  0 or AH_ECORRUPT (or a touch's error). */
int bchunk_open_view(bchunk *c, const uint8_t *b, size_t body_used,
                     bool ends);

#endif /* ARRANGEMENT_BATCH_CHUNK_INT_H */
