/*
 * tools/common/escape.h - the byte escape codec of the changelog and dump
 * text formats, shared by ah-load, ah-dump and the tests.
 *
 * Text form of a byte string: \\ for a backslash, \t for TAB, \n for LF and
 * \xHH for any byte (two hex digits, either case).  The canonical form that
 * tool_escape writes uses \\, \t, \n, bytes 0x20..0x7e as themselves and
 * lowercase \xHH for every other byte, so equal byte strings always print
 * the same.  Unescaping accepts any other byte as itself.  The hex form
 * (ah-dump --hex) is two lowercase digits per byte, nothing else.
 *
 * Pure functions over caller buffers: no allocation, no I/O, never reads
 * beyond the lengths it is given.
 *
 * It must never change the canonical form: changelogs, ah-dump's output and
 * ah-pgsync's pg.tables record are written in it, and what one tool prints
 * another reads back.
 */
#ifndef TOOLS_COMMON_ESCAPE_H
#define TOOLS_COMMON_ESCAPE_H

#include <stddef.h>

/* The most bytes tool_escape writes for len input bytes. */
#define TOOL_ESCAPE_MAX(len) ((len) * 4)

/* Writes the canonical escape of in[0..len) to out (room for at least
 * TOOL_ESCAPE_MAX(len) bytes, not NUL-terminated); returns the bytes written. */
size_t tool_escape(const void *in, size_t len, char *out);

/* Decodes in[0..len) into out (room for len bytes: decoding never grows).
 * Returns 0 and sets *out_len, or -1 and points *reason at a static message
 * ("bad \x escape", "bad escape \q", "trailing backslash"). */
int tool_unescape(const char *in, size_t len, void *out, size_t *out_len,
                  const char **reason);

/* Writes in[0..len) as lowercase hex to out (2 * len bytes, not
 * NUL-terminated); returns 2 * len. */
size_t tool_hex(const void *in, size_t len, char *out);
/* Decodes hex text in[0..len) (either case, an even number of digits)
 * into out (room for len / 2 bytes).  0 and *out_len, or -1 and *reason
 * ("odd number of hex digits", "not a hex digit"). */
int tool_unhex(const char *in, size_t len, void *out, size_t *out_len,
               const char **reason);

/* The value of one hex digit (either case), or -1. */
int tool_hexval(char c);

#endif /* TOOLS_COMMON_ESCAPE_H */
