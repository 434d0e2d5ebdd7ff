/* SPDX-License-Identifier: MIT */
/*
 * rcu_impl.h - what the files of the RCU layer share (private to src/rcu/, the only
 * folder that includes liburcu): the flavours' entry points, the units that wait for
 * a grace period, the tickets and the per-cache state.  rcu_free.c explains them.
 */
#ifndef SHEAF_RCU_IMPL_H
#define SHEAF_RCU_IMPL_H

#include <urcu/urcu-memb.h>

#include "rcu/rcu.h"

#define RCU_FALLBACK_BATCH 64

/* Each flavour's header maps the generic names (call_rcu, ...) to its own, so only one
 * can be included per file; the other flavours' entry points are declared here with
 * the signatures of liburcu's ABI (liburcu-mb.so, liburcu-qsbr.so, 0.13). */
void urcu_mb_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *head));
void urcu_mb_call_rcu_before_fork(void);
void urcu_mb_call_rcu_after_fork_parent(void);
void urcu_mb_call_rcu_after_fork_child(void);
void urcu_mb_barrier(void);
void urcu_mb_synchronize_rcu(void);
int urcu_mb_read_ongoing(void);
struct call_rcu_data *urcu_mb_get_default_call_rcu_data(void);
void urcu_qsbr_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *head));
void urcu_qsbr_call_rcu_before_fork(void);
void urcu_qsbr_call_rcu_after_fork_parent(void);
void urcu_qsbr_call_rcu_after_fork_child(void);
void urcu_qsbr_barrier(void);
void urcu_qsbr_synchronize_rcu(void);
int urcu_qsbr_read_ongoing(void);
struct call_rcu_data *urcu_qsbr_get_default_call_rcu_data(void);
void urcu_qsbr_thread_offline(void);
void urcu_qsbr_thread_online(void);

struct rcu_ops {
	void (*call)(struct rcu_head *head, void (*func)(struct rcu_head *head));
	void (*barrier_all)(void);           /* rcu_barrier(): every callback of the flavour */
	void (*sync)(void);                  /* synchronize_rcu() */
	int (*ongoing)(void);                /* memb/mb: inside a read-side section; qsbr: online */
	struct call_rcu_data *(*warm)(void); /* get_default_call_rcu_data() */
	void (*offline)(void);               /* QSBR only */
	void (*online)(void);
	void (*before_fork)(void); /* call_rcu_before_fork() and the two after it */
	void (*after_fork_parent)(void);
	void (*after_fork_child)(void);
};

extern const struct rcu_ops rcu_flavors[];

/* The flavour (low byte) and whether it is in use (FLAVOR_USED): one word, so that
 * sheaf_rcu_set_flavor() and the first use cannot interleave.  FLAVOR_WARM is set once
 * the flavour's call_rcu worker exists. */
#define FLAVOR_MASK 0xffu
#define FLAVOR_USED 0x100u
#define FLAVOR_WARM 0x200u
extern atomic_uint rcu_flavor_word;
/* Callbacks of this library queued in liburcu and not finished (tickets, deferred page
 * frees): the library destructor waits for them (rcu_free.c). */
extern atomic_long rcu_cbs_pending;
extern atomic_int rcu_warm_pid; /* the process whose call_rcu worker exists */
/* Per-cache barriers' takes so far (barrier.c): numbers rcu_state.taker. */
extern atomic_ulong rcu_take_seq;

#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define tsan_acquire(p) __tsan_acquire(p)
#define tsan_release(p) __tsan_release(p)
#else
#define tsan_acquire(p) ((void)(p))
#define tsan_release(p) ((void)(p))
#endif

/* A fallback batch: objects that could not use a sheaf. */
struct rcu_batch {
	struct rcu_batch *next; /* on a next list or a ticket */
	uint32_t n;
	void *objs[RCU_FALLBACK_BATCH];
};

/* Units (sheaves, batches) waiting for a grace period. */
struct rcu_units {
	struct sheaf_list sheaves; /* through sheaf->link */
	struct rcu_batch *batches;
	long units; /* sheaves + batches */
};

/* OPEN -> RUNNING (the callback) or OPEN -> CLAIMING -> ORPHANED (a barrier; it touches
 * the ticket only while CLAIMING, and the callback frees it only once ORPHANED). */
enum {
	TICKET_OPEN,
	TICKET_RUNNING,
	TICKET_CLAIMING,
	TICKET_ORPHANED,
	TICKET_SEARCHING /* a double-free search reads the units (sheaf_rcu_pending); back to OPEN */
};

/* One call_rcu for every unit of a cache submitted since the previous one. */
struct rcu_ticket {
	struct rcu_head head; /* liburcu hands it back */
	struct sheaf_cache *cache;
	atomic_int state;   /* TICKET_*, see above */
	struct rcu_units u; /* owned by whoever moved state out of OPEN */
};

struct rcu_state {
	pthread_mutex_t lock; /* protects everything below; cv waits on it */
	pthread_cond_t cv;
	pthread_mutex_t barrier_mutex; /* serialises this cache's barriers */
	struct rcu_units next;         /* submitted, waiting for a ticket */
	struct rcu_ticket *ticket;     /* in flight (OPEN or RUNNING), or NULL */
	uint64_t ticket_seq;           /* launches so far */
	struct rcu_batch *fb;          /* fallback batch being filled */
	/* The take number (rcu_take_seq) of the barrier that holds units of this cache
	 * taken back and not yet returned, 0 when none: sheaf_rcu_barrier() waits for it
	 * (barrier.c).  One at a time, under barrier_mutex. */
	atomic_ulong taker;
};

static inline void units_init(struct rcu_units *u)
{
	sheaf_list_init(&u->sheaves);
	u->batches = NULL;
	u->units = 0;
}

/* Move every unit of @from to the end of @to. */
static void units_splice(struct rcu_units *to, struct rcu_units *from)
{
	struct sheaf_list *pos, *tmp;
	sheaf_list_for_each_safe(pos, tmp, &from->sheaves) {
		sheaf_list_del(pos);
		sheaf_list_add_tail(pos, &to->sheaves);
	}
	struct rcu_batch **tail = &to->batches;
	while (*tail)
		tail = &(*tail)->next;
	*tail = from->batches;
	to->units += from->units;
	units_init(from);
}

/* Only after rcu_use() ran once (units exist). */
static inline const struct rcu_ops *rcu_ops_cur(void)
{
	return &rcu_flavors[atomic_load_explicit(&rcu_flavor_word, memory_order_relaxed) &
			    FLAVOR_MASK];
}

static inline bool rcu_is_qsbr(const struct rcu_ops *ops)
{
	return ops->offline != NULL;
}

/* A barrier called inside a memb/mb read-side section: reported (as rcu_wait_prepare
 * does) and true, whether or not anything is in flight, so that the misuse does not
 * depend on timing (until 2026-11-29 a barrier with nothing to wait for returned
 * before it looked).  Reads the flavour without fixing it; qsbr: false (an online
 * thread is put offline for the wait instead). */
bool rcu_barrier_in_reader(const struct sheaf_cache *c);

/* rcu_free.c: the flavour, fixed from now on; its call_rcu worker exists on return
 * unless no thread could be created for it (rcu_worker_started() then false; no Sheaf
 * lock may be held unless FLAVOR_WARM is set). */
const struct rcu_ops *rcu_use(void);
static inline bool rcu_worker_started(void)
{
	return atomic_load_explicit(&rcu_flavor_word, memory_order_acquire) & FLAVOR_WARM;
}
/* Before and after waiting for a grace period (a QSBR thread goes offline; inside a
 * read-side section it is a caller error, reported: -1). */
int rcu_wait_prepare(const struct rcu_ops *ops, const struct sheaf_cache *c);
void rcu_wait_finish(const struct rcu_ops *ops, int was_online);
/* After the grace period: give the units' objects back; returns the objects done. */
long rcu_units_gp_done(struct sheaf_cache *c, struct rcu_units *u);
/* Submit every pcs's rcu_free sheaf of @c (sheaf_cache_for_each callback). */
void rcu_cache_flush_locked(struct sheaf_cache *c, void *arg);

#endif /* SHEAF_RCU_IMPL_H */
