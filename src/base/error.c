/* SPDX-License-Identifier: MIT */
/*
 * error.c - the one error reporter (error.h).  Nothing here allocates or uses stdio:
 * it runs inside malloc, with locks of the caller held, or with a corrupt heap.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"
#include "base/error.h"

static const char *const kind_names[SHEAF_ERR_NR] = {
	[SHEAF_ERR_DOUBLE_FREE] = "double free",
	[SHEAF_ERR_INTERIOR] = "interior pointer",
	[SHEAF_ERR_INVALID_POINTER] = "invalid pointer",
	[SHEAF_ERR_WRONG_CACHE] = "wrong cache",
	[SHEAF_ERR_WRONG_SHEAF] = "wrong sheaf",
	[SHEAF_ERR_INVALID_CACHE] = "invalid cache",
	[SHEAF_ERR_DESTROYED_CACHE] = "destroyed cache",
	[SHEAF_ERR_SIZE_MISMATCH] = "size mismatch",
	[SHEAF_ERR_CORRUPTION] = "corruption",
	[SHEAF_ERR_WRITE_AFTER_FREE] = "write after free",
	[SHEAF_ERR_OVERFLOW] = "buffer overflow",
	[SHEAF_ERR_RCU] = "rcu misuse",
};

const char *sheaf_error_kind_name(enum sheaf_error_kind k)
{
	return (unsigned)k < SHEAF_ERR_NR ? kind_names[k] : "error";
}

/* -1: not decided yet (read from the options on the first report), 0 abort, 1 warn. */
static atomic_int error_mode = -1;
static atomic_ulong error_count;

bool sheaf_error_warn(void)
{
	int m = atomic_load_explicit(&error_mode, memory_order_relaxed);
	if (sheaf_unlikely(m < 0)) {
		/* Options are parsed once, without allocating (options.c). */
		m = sheaf_options_on_error_warn();
		atomic_store_explicit(&error_mode, m, memory_order_relaxed);
	}
	return m == 1;
}

void sheaf_error_set_warn(int warn)
{
	atomic_store_explicit(&error_mode, warn ? 1 : 0, memory_order_relaxed);
}

unsigned long sheaf_error_count(void)
{
	return atomic_load_explicit(&error_count, memory_order_relaxed);
}

/* ---- Formatting ------------------------------------------------------------------- */

struct out {
	char *b;
	size_t cap, n;
};

static void put(struct out *o, char ch)
{
	if (o->n + 1 < o->cap)
		o->b[o->n++] = ch;
}

static void put_num(struct out *o, unsigned long long v, unsigned base, bool neg, int width,
		    char pad, bool left)
{
	char t[24];
	int k = 0;
	do {
		t[k++] = "0123456789abcdef"[v % base];
		v /= base;
	} while (v);
	int len = k + (neg ? 1 : 0);
	if (!left && pad == '0' && neg)
		put(o, '-');
	for (; !left && width > len; width--)
		put(o, pad);
	if (neg && !(pad == '0' && !left))
		put(o, '-');
	while (k > 0)
		put(o, t[--k]);
	for (; left && width > len; width--)
		put(o, ' ');
}

/* One conversion's flags ('-', '0', '#'), width and length modifier. */
struct fmt_spec {
	bool left, alt;
	char pad;
	int width;
	int lng; /* 0 int, 1 long, 2 long long, 3 size_t */
};

/* Parse the flags, width and length at @f (just after the '%'); returns the position
 * of the conversion character. */
static const char *fmt_parse(const char *f, struct fmt_spec *sp)
{
	*sp = (struct fmt_spec){ .pad = ' ' };
	for (;; f++) {
		if (*f == '-')
			sp->left = true;
		else if (*f == '0')
			sp->pad = '0';
		else if (*f == '#')
			sp->alt = true;
		else
			break;
	}
	while (*f >= '0' && *f <= '9')
		sp->width = sp->width * 10 + (*f++ - '0');
	if (*f == 'l') {
		sp->lng = 1;
		if (*++f == 'l') {
			sp->lng = 2;
			f++;
		}
	} else if (*f == 'z') {
		sp->lng = 3;
		f++;
	}
	return f;
}

/* A string argument, its control characters written as \xNN: a cache name, a type name
 * or an option's value comes from the program or the environment, and a newline in one
 * would break the report's one line and let the rest pose as a report of its own
 * (README "Errors"; a multi-line report puts its newlines in the format). */
static void fmt_str(struct out *o, const char *s, const struct fmt_spec *sp)
{
	if (!s)
		s = "(null)";
	int len = 0, width = sp->width;
	for (const unsigned char *q = (const unsigned char *)s; *q; q++)
		len += *q < 0x20 || *q == 0x7f ? 4 : 1;
	for (; !sp->left && width > len; width--)
		put(o, ' ');
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch < 0x20 || ch == 0x7f) {
			put(o, '\\');
			put(o, 'x');
			put(o, "0123456789abcdef"[ch >> 4]);
			put(o, "0123456789abcdef"[ch & 15]);
		} else {
			put(o, *s);
		}
	}
	for (; sp->left && width > len; width--)
		put(o, ' ');
}

/* The conversion @conv (not 0) with @sp, its argument taken from @ap. */
static void fmt_conv(struct out *o, char conv, const struct fmt_spec *sp, va_list *ap)
{
	switch (conv) {
	case 's':
		fmt_str(o, va_arg(*ap, const char *), sp);
		break;
	case 'c':
		put(o, (char)va_arg(*ap, int));
		break;
	case 'p':
		put(o, '0');
		put(o, 'x');
		put_num(o, (uintptr_t)va_arg(*ap, void *), 16, false, 0, ' ', false);
		break;
	case 'd':
	case 'i': {
		long long v = sp->lng == 0 ? va_arg(*ap, int) :
			      sp->lng == 1 ? va_arg(*ap, long) :
			      sp->lng == 2 ? va_arg(*ap, long long) :
					     (long long)va_arg(*ap, size_t);
		put_num(o, v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v, 10, v < 0,
			sp->width, sp->pad, sp->left);
		break;
	}
	case 'u':
	case 'x': {
		unsigned long long v = sp->lng == 0 ? va_arg(*ap, unsigned) :
				       sp->lng == 1 ? va_arg(*ap, unsigned long) :
				       sp->lng == 2 ? va_arg(*ap, unsigned long long) :
						      va_arg(*ap, size_t);
		if (conv == 'x' && sp->alt) {
			put(o, '0');
			put(o, 'x');
		}
		put_num(o, v, conv == 'x' ? 16 : 10, false, sp->width, sp->pad, sp->left);
		break;
	}
	case '%':
		put(o, '%');
		break;
	default: /* unknown conversion: print it as it is */
		put(o, '%');
		put(o, conv);
		break;
	}
}

size_t sheaf_vfmt(char *buf, size_t cap, const char *fmt, va_list ap)
{
	struct out o = { buf, cap, 0 };
	if (!cap)
		return 0;
	va_list aq;
	va_copy(aq, ap);
	for (const char *f = fmt; *f; f++) {
		if (*f != '%') {
			put(&o, *f);
			continue;
		}
		struct fmt_spec sp;
		f = fmt_parse(f + 1, &sp);
		if (!*f)
			break; /* a lone '%' at the end */
		fmt_conv(&o, *f, &sp, &aq);
	}
	va_end(aq);
	o.b[o.n] = 0;
	return o.n;
}

size_t sheaf_fmt(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	size_t n = sheaf_vfmt(buf, cap, fmt, ap);
	va_end(ap);
	return n;
}

/* ---- Reports -------------------------------------------------------------------------- */

static size_t head_v(char *buf, size_t cap, enum sheaf_error_kind k, const char *cache,
		     const void *addr, const char *fmt, va_list ap)
{
	size_t n = sheaf_fmt(buf, cap, "sheaf: %s: cache '%s' address %p", sheaf_error_kind_name(k),
			     cache ? cache : "?", addr);
	if (fmt && *fmt && n + 2 < cap) {
		buf[n++] = ':';
		buf[n++] = ' ';
		n += sheaf_vfmt(buf + n, cap - n, fmt, ap);
	}
	return n;
}

size_t sheaf_error_head(char *buf, size_t cap, enum sheaf_error_kind k, const char *cache,
			const void *addr, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	size_t n = head_v(buf, cap, k, cache, addr, fmt, ap);
	va_end(ap);
	return n;
}

/* Whole lines, whatever the thread's state: write(2) is a cancellation point, and a
 * report is often written with a lock held (a thread cancelled there under
 * SHEAF_ON_ERROR=warn left it held: every later call hung), a signal may interrupt it
 * (EINTR: the rest of the line was dropped), and the caller's errno stays as it was. */
void sheaf_report_write(const char *buf, size_t n)
{
	int e = errno, cs;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
	size_t off = 0;
	while (off < n) {
		ssize_t w = write(2, buf + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break; /* stderr closed: nothing else to do */
		off += (size_t)w;
	}
	pthread_setcancelstate(cs, NULL);
	errno = e;
}

void sheaf_error_emit(const char *buf, size_t n)
{
	atomic_fetch_add_explicit(&error_count, 1, memory_order_relaxed);
	sheaf_report_write(buf, n);
	if (!sheaf_error_warn())
		abort(); /* also when stderr is closed */
}

void sheaf_error(enum sheaf_error_kind k, const char *cache, const void *addr, const char *fmt, ...)
{
	static const char warn_tail[] = " (leaked, continuing: SHEAF_ON_ERROR=warn)";
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	size_t n = head_v(buf, sizeof(buf) - sizeof(warn_tail) - 1, k, cache, addr, fmt, ap);
	va_end(ap);
	if (sheaf_error_warn()) {
		memcpy(buf + n, warn_tail, sizeof(warn_tail) - 1);
		n += sizeof(warn_tail) - 1;
	}
	buf[n++] = '\n';
	sheaf_error_emit(buf, n);
}
