/* SPDX-License-Identifier: MIT */
/*
 * fuzz_model_more.h - the operations and checks of fuzz_model.h that came after its
 * first corpus (included by it, in the middle: it uses the model's table and helpers).
 *
 * Always on (they read no input byte, so every committed input means what it did):
 * realloc's promises (the same pointer within a class and for an extent that still
 * holds the request, every kept byte checked, not only the first 256).
 *
 * Only for inputs whose first byte has 0x80 ("v2"; the committed corpus before them has
 * none): memalign with any alignment, realloc from NULL, malloc_usable_size(NULL),
 * alignments up to 16 MiB; on the object API, misuse of prefilled sheaves under
 * SHEAF_ON_ERROR=warn (a return to another cache, a second return, a refill after the
 * return: each exactly one report, nothing else changed), NULL entries in free_bulk,
 * sheaf_cache_free(c, NULL), alloc_bulk of 0, into NULL and of too many, and a destroy that must do the waiting
 * itself (free_rcu in flight, prefilled sheaves not returned: no object may be
 * reported as still allocated).
 */
#ifndef SHEAF_FUZZ_MODEL_MORE_H
#define SHEAF_FUZZ_MODEL_MORE_H

#include <sys/mman.h>

/* realloc of a held block to @n bytes; docs/malloc.md, "realloc": within the same class
 * the same pointer, growing or shrinking; an extent to an extent size it holds stays. */
static void fz_realloc(struct fz_state *s, size_t n)
{
	size_t k = fz_pick(s, FZ_MALLOC, fz_u16(s));
	if (k == SIZE_MAX || !fz_room(s, 0, n))
		return;
	struct fz_obj o = s->obj[k];
	fz_verify(&o, "realloc");
	struct sheaf_cache *oc = sheaf_cache_of(o.p);
	errno = FZ_ERRNO;
	if (n == 0) {
		fz_remove(s, k);
		if (sheaf_realloc(o.p, 0) != NULL)
			fz_fail("realloc(p, 0) did not free");
		fz_errno_kept(s, "realloc(p, 0)", true);
		return;
	}
	void *p = sheaf_realloc(o.p, n);
	if (!p) {
		fz_alloc_failed(s, "realloc", errno);
		return; /* the old block is intact: verified later */
	}
	bool stay = oc ? n <= SHEAF_SC_MAX && sheaf_sc_index(n) ==
						      sheaf_sc_index(sheaf_cache_object_size(oc)) :
			 n > SHEAF_SC_MAX && ((n + 4095) & ~(size_t)4095) <= o.size;
	if (stay && p != o.p)
		fz_fail("realloc(%p of %zu -> %zu) moved to %p: %s", (void *)o.p, o.size, n, p,
			oc ? "same class" : "an extent that holds it");
	fz_remove(s, k);
	/* A move copies what the old block held and the new one takes (min(usable, n)). */
	fz_verify_prefix(p, &o, o.size < n ? o.size : n, "realloc", n);
	fz_malloc_new(s, p, n, "realloc", true);
}

/* memalign rounds an alignment that is not a power of two up to one (docs/malloc.md). */
static void fz_memalign_any(struct fz_state *s, size_t n)
{
	size_t al = fz_u16(s) % 9000;
	size_t pow = 1;
	while (pow < al)
		pow <<= 1;
	if (!fz_room(s, 1, n + pow))
		return;
	void *p = sheaf_malloc_memalign(al, n);
	if (!p)
		return fz_alloc_failed(s, "memalign", errno);
	if ((uintptr_t)p & (pow - 1))
		fz_fail("memalign(%zu, %zu) = %p: not aligned to %zu", al, n, p, pow);
	fz_malloc_new(s, p, n, "memalign", false);
}

/* ---- The object API ---------------------------------------------------------------- */

/* Misuse of prefilled sheaf @j of cache @i under SHEAF_ON_ERROR=warn (sheaf.h, README
 * "Errors"): exactly one report each, and the sheaf and the cache as they were. */
static void fz_prefill_misuse(struct fz_state *s, int i, unsigned how)
{
	struct fz_cache *fc = &s->cache[i];
	int j = (int)(how % FZ_PREFILLED), other = -1;
	if (!fc->pf[j])
		return;
	for (int k = 0; k < FZ_CACHES; k++)
		if (k != i && s->cache[k].c)
			other = k;
	bool warn = sheaf_error_warn();
	sheaf_error_set_warn(1);
	unsigned long before = sheaf_error_count();
	struct sheaf_prefilled *pf = fc->pf[j];
	unsigned want = (how >> 4) + 1, reports = 0;
	int r = 0;
	switch ((how >> 1) % 3) {
	case 0: /* to another cache: return and refill */
		if (other < 0)
			break;
		sheaf_cache_return(s->cache[other].c, pf);
		r = sheaf_cache_refill(s->cache[other].c, &fc->pf[j], want);
		reports = 2;
		if (fc->pf[j] != pf || sheaf_prefilled_size(pf) != fc->pf_n[j])
			fz_fail("a sheaf passed to another cache changed: %u objects, %u before",
				sheaf_prefilled_size(fc->pf[j]), fc->pf_n[j]);
		break;
	case 1: /* returned twice */
	case 2: /* refilled after its return */
		sheaf_cache_return(fc->c, pf);
		fc->pf[j] = NULL;
		if ((how >> 1) % 3 == 1) {
			sheaf_cache_return(fc->c, pf);
		} else {
			struct sheaf_prefilled *q = pf;
			r = sheaf_cache_refill(fc->c, &q, want);
			if (q != pf)
				fz_fail("refill of a returned sheaf replaced it");
		}
		reports = 1;
		break;
	}
	unsigned long got = sheaf_error_count() - before;
	sheaf_error_set_warn(warn);
	if (got != reports || (reports && (how >> 1) % 3 != 1 && r != -EINVAL))
		fz_fail("prefilled sheaf misuse %u: %lu reports, %u expected; refill returned %d",
			(how >> 1) % 3, got, reports, r);
}

/* free_bulk with NULL entries among the objects, free(c, NULL), alloc_bulk of 0 (sheaf.h,
 * README "Errors": a NULL object is ignored, as free(NULL); n of 0 returns 0, errno kept). */
static void fz_cache_nulls(struct fz_state *s, int i)
{
	struct fz_cache *fc = &s->cache[i];
	void *v[48];
	unsigned n = fz_u8(s), m = 0;
	unsigned long reports = sheaf_error_count();
	errno = FZ_ERRNO;
	if (sheaf_cache_alloc_bulk(fc->c, 0, v) != 0 || errno != FZ_ERRNO)
		fz_fail("alloc_bulk of 0: not 0, or errno changed");
	/* A NULL array: EINVAL; more than half the machine's memory: ENOMEM at once, with
	 * nothing written to the array (ASan sees a write past v). */
	if (sheaf_cache_alloc_bulk(fc->c, 3, NULL) != 0 || errno != EINVAL)
		fz_fail("alloc_bulk into NULL: not 0 with EINVAL (errno %d)", errno);
	if (sheaf_cache_alloc_bulk(fc->c, (size_t)1 << (40 + n % 24), v) != 0 || errno != ENOMEM)
		fz_fail("alloc_bulk of 2^%u objects: not 0 with ENOMEM (errno %d)", 40 + n % 24,
			errno);
	if (sheaf_error_count() != reports)
		fz_fail("alloc_bulk of 0, into NULL or of too many was reported as misuse");
	errno = FZ_ERRNO;
	sheaf_cache_free(fc->c, NULL);
	while (m < (n & 31)) {
		if (fz_u8(s) & 1) {
			v[m++] = NULL;
			continue;
		}
		size_t k = fz_pick(s, i, fz_u8(s));
		if (k == SIZE_MAX)
			break;
		fz_verify(&s->obj[k], "free_bulk with NULLs");
		v[m++] = s->obj[k].p;
		fz_remove(s, k);
	}
	if (n & 0x80)
		v[m++] = NULL; /* a NULL last, where a run of objects ends */
	sheaf_cache_free_bulk(fc->c, m, v);
	fz_errno_kept(s, "free(NULL) and free_bulk with NULL entries", false);
}

/* Destroy with no barrier, no shrink and no return first: destroy waits for the cache's
 * own free_rcu (D5) and takes back prefilled sheaves (sheaf.h).  Its output, read back
 * from a memfd, must not say that an object is still allocated. */
static void fz_cache_destroy_direct(struct fz_state *s, int i)
{
	struct fz_cache *fc = &s->cache[i];
	for (size_t k = 0; k < s->nobj;) {
		if (s->obj[k].owner != i) {
			k++;
			continue;
		}
		fz_verify(&s->obj[k], "free before destroy");
		if (s->obj[k].tag & 2)
			sheaf_cache_free_rcu(fc->c, s->obj[k].p);
		else
			sheaf_cache_free(fc->c, s->obj[k].p);
		fz_remove(s, k);
	}
	int fd = memfd_create("fuzz-destroy", 0), saved = dup(2);
	if (fd < 0 || saved < 0 || dup2(fd, 2) < 0)
		fz_fail("memfd for the destroy's output: errno %d", errno);
	sheaf_cache_destroy(fc->c);
	dup2(saved, 2);
	close(saved);
	char out[1024];
	ssize_t len = pread(fd, out, sizeof(out) - 1, 0);
	close(fd);
	out[len > 0 ? len : 0] = '\0';
	if (len > 0)
		fputs(out, stderr);
	if (strstr(out, "still allocated"))
		fz_fail("cache %d: destroy with free_rcu in flight reported a leak", i);
	memset(fc, 0, sizeof(*fc));
}

/* Operation 12 of fuzz_cache: sheaf_cache_of; in v2 also the operations above. */
static void fz_cache_more(struct fz_state *s, int i)
{
	unsigned sub = s->v2 ? fz_u8(s) : 0;
	switch (sub % 4) {
	case 0: { /* sheaf_cache_of on held objects of any owner */
		size_t k = fz_pick(s, -2, fz_u16(s));
		if (k != SIZE_MAX && s->obj[k].owner >= 0 &&
		    sheaf_cache_of(s->obj[k].p) != s->cache[s->obj[k].owner].c)
			fz_fail("sheaf_cache_of(%p) is not its cache", (void *)s->obj[k].p);
		break;
	}
	case 1:
		fz_prefill_misuse(s, i, sub >> 2);
		break;
	case 2:
		fz_cache_nulls(s, i);
		break;
	case 3:
		fz_cache_destroy_direct(s, i);
		break;
	}
}

#endif /* SHEAF_FUZZ_MODEL_MORE_H */
