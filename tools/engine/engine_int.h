/*
 * tools/engine/engine_int.h - what engine.c shares with reader.c: setting
 * the graph's one-line message.  Not for the engine's users.
 */
#ifndef TOOLS_ENGINE_ENGINE_INT_H
#define TOOLS_ENGINE_ENGINE_INT_H

#include "tools/engine/engine.h"

/* Sets g's message (printf-style) and returns rc. */
int eg__fail(eg_graph *g, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif /* TOOLS_ENGINE_ENGINE_INT_H */
