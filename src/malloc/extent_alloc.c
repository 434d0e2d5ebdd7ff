/* SPDX-License-Identifier: MIT */
/*
 * extent_alloc.c - large blocks of the malloc front end (docs/malloc.md): new extents,
 * from the cache (extent.c: one cached extent, or several gathered into one mapping with
 * mremap) or mapped afresh, and realloc of an extent.  No lock of its own: the cache's
 * and the registry's (extent_registry.c) are taken inside their functions.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "malloc/malloc_impl.h"

/* Map @len bytes aligned to @align (a power of two >= PAGE): over-map by
 * align - PAGE and trim both ends. */
static void *map_aligned(size_t len, size_t align)
{
	size_t extra = align - PAGE;
	if (len > SIZE_LIMIT - extra)
		return NULL;
	char *m = sheaf_sys_mmap(NULL, len + extra, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS);
	if (m == MAP_FAILED)
		return NULL;
	char *p = (char *)round_up((uintptr_t)m, align);
	/* A trim that fails (reported) leaves address space mapped beside the extent,
	 * never the extent itself. */
	if (p > m)
		(void)sheaf_os_unmap(m, (size_t)(p - m));
	if ((size_t)(p - m) < extra)
		(void)sheaf_os_unmap(p + len, extra - (size_t)(p - m));
	return p;
}

/* A new mapping for a large block of @n bytes aligned to @align, *@len bytes long
 * (the size step; less where address space is short).  The rounding to a size step
 * costs address space, not memory: where address space is limited (RLIMIT_AS, checked
 * at each mapping because a program may set it at any time) or runs out, do without
 * it, as glibc does.  Such an extent is not cached when freed (malloc_extent_free): its
 * address space goes back at once. */
static void *large_map(size_t n, size_t align, size_t *len)
{
	size_t exact = round_up(n, PAGE);
	if (exact < *len && malloc_address_space_limited())
		*len = exact;
	void *p = map_aligned(*len, align);
	if (!p && exact < *len) {
		*len = exact;
		p = map_aligned(*len, align);
	}
	if (!p && sheaf_malloc_reclaim()) {
		/* Out of address space or memory: what Sheaf keeps for reuse went back
		 * (the extent cache, and the freed slabs and free heap blocks, which
		 * otherwise wait for their decay); one more try. */
		*len = exact;
		p = map_aligned(*len, align);
	}
	return p;
}

/* Move the cached extent @src of @len bytes to @dst, inside a new mapping of
 * ours, with mremap: its page tables move, its pages are not faulted again.
 * Whatever is left of @src after a failure goes back to the OS: a kernel
 * before 6.17 moves no range that spans several of its mappings (extents
 * merged in the cache may), and one that fails part of the way may have
 * moved some of them (a cached extent's bytes do not matter).  A failed move
 * may also have unmapped @dst first: it is then mapped afresh.  False when
 * even that fails (@dst is then a hole). */
static bool extent_move(char *src, size_t len, char *dst)
{
	if (sheaf_sys_mremap(src, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, dst) != MAP_FAILED) {
		CTR_INC(extent_moves);
		return true;
	}
	malloc_extent_unmap(src, len);
	return sheaf_sys_mmap(dst, len, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED) != MAP_FAILED;
}

/* A new mapping of @len bytes aligned to @align, its start filled with the
 * cached extents of @pk (malloc_extent_take), moved one after the other; *@filled
 * tells how many bytes they cover, *@vmas how many kernel mappings the
 * result spans.  NULL when no mapping can be made: the extents not moved yet
 * go back to the cache (a failed move gave its own back to the OS). */
static void *extent_gather(struct malloc_extent_pick *pk, size_t len, size_t align, size_t *filled,
			   unsigned int *vmas)
{
	char *dst = map_aligned(len, align);
	size_t off = 0;
	unsigned int i = 0;
	if (dst) {
		*vmas = 0;
		for (; i < pk->n; *vmas += pk->piece[i].vmas, off += pk->piece[i++].len)
			if (!extent_move(pk->piece[i].p, pk->piece[i].len, dst + off))
				break;
		if (i == pk->n) {
			*filled = off;
			*vmas += off < len; /* the fresh tail */
			return dst;
		}
		(void)sheaf_os_unmap(dst, len); /* it has a hole */
		i++;
	}
	for (; i < pk->n; i++)
		malloc_extent_free(pk->piece[i].p, pk->piece[i].len, pk->piece[i].vmas);
	return NULL;
}

/* A large block of @n bytes from the cache, its length in *@len and its
 * kernel mappings in *@vmas: one cached extent (@zero: cleared), or several
 * moved into a new mapping of the request's whole pages, not rounded to a
 * size step as a fresh mapping is: its bytes are then the cache's resident
 * pages, where the rounding's would be new pages that a later reuse of the
 * extent faults in.  NULL when nothing is cached. */
static void *large_cached(size_t n, size_t align, bool zero, size_t *len, unsigned int *vmas)
{
	struct malloc_extent_pick pk;
	size_t need = round_up(n, PAGE), filled;
	malloc_extent_take(need, align, &pk);
	if (pk.one) {
		CTR_INC(extent_reuses);
		if (zero)
			memset(pk.piece[0].p, 0, n); /* fresh mappings are zero already */
		*len = pk.piece[0].len;
		*vmas = pk.piece[0].vmas;
		return pk.piece[0].p;
	}
	if (!pk.n)
		return NULL;
	void *p = extent_gather(&pk, need, align, &filled, vmas);
	if (p) {
		CTR_INC(extent_gathers);
		*len = need;
		if (zero)
			memset(p, 0, filled < n ? filled : n); /* the rest is new */
	}
	return p;
}

void *malloc_large_alloc(size_t n, size_t align, bool zero)
{
	if (unlikely(n > SIZE_LIMIT - PAGE)) {
		errno = ENOMEM;
		return NULL;
	}
	malloc_fork_handlers_ensure();
	const int saved_errno = errno; /* a success after a refused mapping keeps it */
	size_t len = 0;
	unsigned int vmas = 1;
	if (align < PAGE)
		align = PAGE;
	void *p = large_cached(n, align, zero, &len, &vmas);
	if (!p) {
		len = malloc_extent_len(n);
		p = large_map(n, align, &len);
		if (!p) {
			errno = ENOMEM;
			return NULL;
		}
		CTR_INC(extent_maps);
	}
	/* The registry's table may have to grow, a mapping of its own, which the kernel
	 * may refuse at an address-space limit after the block's own mapping succeeded:
	 * what Sheaf keeps goes back first, as for any refused mapping (docs/malloc.md
	 * "Limits"; until 2026-11-29 the block was unmapped and NULL returned at once,
	 * with hundreds of MB of freed heap still mapped; adversarial run). */
	if (unlikely(!malloc_extent_register(p, len, vmas)) &&
	    (!sheaf_malloc_reclaim() || !malloc_extent_register(p, len, vmas))) {
		(void)sheaf_os_unmap(p, len);
		errno = ENOMEM;
		return NULL;
	}
	errno = saved_errno;
	CTR_INC(extent_allocs);
	/* A program of large blocks only may never grow Sheaf's heap to the reaper's
	 * threshold: its live extents count too, so that the ones it frees still go back
	 * after the delay when it goes idle (once the core is initialised:
	 * sheaf_reaper_kick() does nothing before, and only small blocks initialise it).
	 * From an allocation, never from a free (malloc.h sheaf_malloc_reaper_start). */
	if (unlikely(!atomic_load_explicit(&sheaf_reaper_kicked, memory_order_relaxed)) &&
	    malloc_extent_live_bytes() >= SHEAF_REAP_MALLOC_START)
		sheaf_malloc_reaper_start();
	return p;
}

/* The last step of malloc_extent_resize: the extent @p of @len bytes into @q, a mapping
 * of @nlen bytes already registered, by mremap (its pages move unfaulted) or, where
 * mremap cannot, by a copy.  False (ENOMEM) when @q is lost meanwhile: @p stays. */
static bool extent_move_to(void *p, size_t len, void *q, size_t nlen)
{
	/* @p leaves the registry before mremap unmaps it: from that moment another
	 * thread's mmap may get the address and register it, and until 2026-11-29 the
	 * registry then held @p twice, so that the remove after the move could take the new
	 * owner's entry, whose block kept the old length (realloc racing with large
	 * mallocs on other threads; contents lost, a crash; adversarial run).  Put back if
	 * mremap fails: the block is still ours and mapped. */
	unsigned int vmas = 1;
	(void)malloc_extent_remove(p, &vmas);
	if (sheaf_sys_mremap(p, len, nlen, MREMAP_MAYMOVE | MREMAP_FIXED, q) != MAP_FAILED) {
		CTR_INC(extent_remaps);
		return true;
	}
	(void)malloc_extent_register(p, len, vmas);
	/* An extent merged in the cache from neighbouring mappings, or gathered from
	 * several, may span several of the kernel's mappings, which mremap cannot grow
	 * (EFAULT): copy it instead.  Some kernels (5.x) unmap the destination before they
	 * find that out: it is mapped again first. */
	if (sheaf_sys_mmap(q, nlen, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED) == MAP_FAILED) {
		malloc_extent_lookup(q, true);
		(void)sheaf_os_unmap(q, nlen);
		errno = ENOMEM;
		return false;
	}
	memcpy(q, p, len);
	malloc_extent_remove(p, &vmas);
	malloc_extent_free(p, len, vmas);
	return true;
}

/* realloc of an extent of @len bytes at @p to @n > SHEAF_SC_MAX bytes:
 * shrink in place (the tail goes back at once: it is a realloc the program
 * asked for, not a free), grow with mremap, which moves the pages without
 * copying them. */
void *malloc_extent_resize(void *p, size_t len, size_t n)
{
	/* A growth that cannot stay in place fails its first mremap (ENOMEM) and then
	 * succeeds by moving: a successful realloc leaves errno as it was (README). */
	const int saved_errno = errno;
	if (unlikely(n > SIZE_LIMIT - PAGE)) {
		errno = ENOMEM;
		return NULL;
	}
	size_t nlen = malloc_extent_len(n);
	/* @n fits: the block stays where it is.  An extent mapped at its exact length
	 * (under an address-space limit, or split from a cached one) may be shorter than
	 * the step @n rounds to; until 2026-11-29 such a shrink was taken for a growth and
	 * could move the block, grow it, or fail with ENOMEM (adversarial run). */
	if (round_up(n, PAGE) <= len && nlen >= len)
		return p;
	/* In place first: a shrink (the tail unmapped), a growth when the pages after it
	 * are free.  Nobody else may use @p meanwhile (it is being reallocated). */
	if (nlen < len)
		malloc_extent_free_check((char *)p + nlen, len - nlen);
	if (sheaf_sys_mremap(p, len, nlen, 0, NULL) != MAP_FAILED) {
		malloc_extent_set_len(p, nlen);
		CTR_INC(extent_remaps);
		return p;
	}
	/* A shrink the kernel refused (a mapping split past vm.max_map_count): the block
	 * stays as it was, which @n fits. */
	if (nlen < len) {
		errno = saved_errno;
		return p;
	}
	/* Moving: the destination is mapped and registered first, so that every step that
	 * can fail comes before the block moves, and a failure leaves it where it was
	 * (realloc's contract); then mremap moves the pages over our own mapping. */
	void *q = sheaf_sys_mmap(NULL, nlen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
	if (q == MAP_FAILED && sheaf_malloc_reclaim())
		q = sheaf_sys_mmap(NULL, nlen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
	if (q == MAP_FAILED) {
		errno = ENOMEM;
		return NULL;
	}
	if (unlikely(!malloc_extent_register(q, nlen, 1))) {
		(void)sheaf_os_unmap(q, nlen);
		errno = ENOMEM;
		return NULL;
	}
	/* The last step that can fail is the move itself (rare): the old place is
	 * checked before its pages go. */
	malloc_extent_free_check(p, len);
	if (!extent_move_to(p, len, q, nlen))
		return NULL;
	/* A moving realloc counts a malloc and a free (docs/malloc.md, SHEAF_MALLOC_STATS). */
	CTR_INC(extent_allocs);
	CTR_INC(extent_frees);
	errno = saved_errno;
	return q;
}
