/* SPDX-License-Identifier: MIT */
/*
 * error.h - the one error reporter of every layer (base layer; README "Errors").
 *
 * Every misuse Sheaf detects is printed as one line on stderr,
 *
 *   sheaf: <kind>: cache '<name>' address 0x<addr>: <detail>
 *
 * and then the process aborts, or, with SHEAF_ON_ERROR=warn, the line ends with
 * " (leaked, continuing: SHEAF_ON_ERROR=warn)" and the call returns: the caller then
 * leaks whatever it was given (nothing is freed twice, nothing is handed out twice).
 * Debug caches follow the line with indented detail lines (docs/debugging.md).
 *
 * The error path never allocates: lines are formatted on the stack by sheaf_fmt()
 * (below, no stdio) and written with write(2), because a report may come from inside
 * malloc or with a corrupt heap.
 */
#ifndef SHEAF_BASE_ERROR_H
#define SHEAF_BASE_ERROR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* The kinds; the names are the <kind> of the line, documented in the README. */
enum sheaf_error_kind {
	SHEAF_ERR_DOUBLE_FREE,      /* the object is already free */
	SHEAF_ERR_INTERIOR,         /* inside an object of the cache, not its start */
	SHEAF_ERR_INVALID_POINTER,  /* not memory of this allocator (foreign) */
	SHEAF_ERR_WRONG_CACHE,      /* an object of another cache */
	SHEAF_ERR_WRONG_SHEAF,      /* a prefilled sheaf of another cache */
	SHEAF_ERR_INVALID_CACHE,    /* NULL, or not a cache handle */
	SHEAF_ERR_DESTROYED_CACHE,  /* a cache used or destroyed after its destroy */
	SHEAF_ERR_SIZE_MISMATCH,    /* free_sized with a size that is not the allocation's */
	SHEAF_ERR_CORRUPTION,       /* allocator metadata overwritten (free list, state word) */
	SHEAF_ERR_WRITE_AFTER_FREE, /* debug caches: poison of a free object overwritten */
	SHEAF_ERR_OVERFLOW,         /* debug caches: red zone overwritten */
	SHEAF_ERR_RCU,              /* an RCU call where it would deadlock or cannot work */
	SHEAF_ERR_NR
};

/* The <kind> text of @k. */
const char *sheaf_error_kind_name(enum sheaf_error_kind k);

/* Report one misuse: the line above, with @cache ("?" if NULL) and @addr, and the
 * detail formatted from @fmt (sheaf_fmt conversions).  Aborts unless
 * SHEAF_ON_ERROR=warn; returns (after the report) only under warn. */
void sheaf_error(enum sheaf_error_kind k, const char *cache, const void *addr, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* For reporters that add lines (debug caches): the first line into @buf (no newline,
 * no warn suffix); returns its length. */
size_t sheaf_error_head(char *buf, size_t cap, enum sheaf_error_kind k, const char *cache,
			const void *addr, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
/* Write @n bytes of @buf to stderr, count the report, and abort unless warn. */
void sheaf_error_emit(const char *buf, size_t n);

/* Write a report that never aborts (the debug-objects tracker's, which reports the
 * program's own objects, as the kernel's debugobjects warns): one write(2). */
void sheaf_report_write(const char *buf, size_t n);

/* SHEAF_ON_ERROR=warn in effect (read once from the options; tests may switch it). */
bool sheaf_error_warn(void);
void sheaf_error_set_warn(int warn);
/* options.c: SHEAF_ON_ERROR=warn in the options (parsed on first use, no allocation). */
int sheaf_options_on_error_warn(void);
/* Reports made so far in this process. */
unsigned long sheaf_error_count(void);

/* Tiny vsnprintf that never allocates and never calls stdio: %s %c %p %%, and
 * d i u x with the length modifiers l ll z and an optional width with '0' or '-'
 * flags.  Always NUL-terminates; returns the length written (truncated at cap - 1). */
size_t sheaf_vfmt(char *buf, size_t cap, const char *fmt, va_list ap);
size_t sheaf_fmt(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif /* SHEAF_BASE_ERROR_H */
