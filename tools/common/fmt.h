/*
 * tools/common/fmt.h - human number formats for the tools' tables: counts
 * with thousands separators and byte sizes in binary units.
 *
 * Pure functions writing into the caller's buffer (TOOL_FMT_LEN bytes);
 * each returns that buffer, so calls can sit inside one printf.
 *
 * Nothing here may depend on the locale: the separators are always ',' and
 * '.', so the tables, and the tests that read them, are the same everywhere.
 */
#ifndef TOOLS_COMMON_FMT_H
#define TOOLS_COMMON_FMT_H

#include <stdint.h>

#define TOOL_FMT_LEN 32

/* 1234567 -> "1,234,567". */
char *tool_fmt_count(char *buf, uint64_t n);
/* Bytes in B below 1 KiB ("512 B"), else KiB/MiB/GiB/TiB with one decimal
 * ("1.5 KiB", "12.0 MiB"), rounded to nearest. */
char *tool_fmt_bytes(char *buf, uint64_t n);

#endif /* TOOLS_COMMON_FMT_H */
