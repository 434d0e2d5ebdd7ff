/* SPDX-License-Identifier: MIT */
/* list.h - intrusive circular doubly linked lists (the kernel's list_head shape). */
#ifndef SHEAF_LIST_H
#define SHEAF_LIST_H

#include <stddef.h>

struct sheaf_list {
	struct sheaf_list *next, *prev;
};

#define sheaf_container_of(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))

static inline void sheaf_list_init(struct sheaf_list *h)
{
	h->next = h->prev = h;
}
static inline int sheaf_list_empty(const struct sheaf_list *h)
{
	return h->next == h;
}
static inline void sheaf_list_insert(struct sheaf_list *n, struct sheaf_list *prev,
				     struct sheaf_list *next)
{
	n->next = next;
	n->prev = prev;
	prev->next = n;
	next->prev = n;
}
static inline void sheaf_list_add(struct sheaf_list *n, struct sheaf_list *h)
{
	sheaf_list_insert(n, h, h->next);
}
static inline void sheaf_list_add_tail(struct sheaf_list *n, struct sheaf_list *h)
{
	sheaf_list_insert(n, h->prev, h);
}
static inline void sheaf_list_del(struct sheaf_list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = n;
}
/* Move every entry of @from to the front of @to in O(1); @from becomes empty. */
static inline void sheaf_list_splice_init(struct sheaf_list *from, struct sheaf_list *to)
{
	if (sheaf_list_empty(from))
		return;
	struct sheaf_list *first = from->next, *last = from->prev;
	first->prev = to;
	last->next = to->next;
	to->next->prev = last;
	to->next = first;
	sheaf_list_init(from);
}
#define sheaf_list_first(h, type, member) sheaf_container_of((h)->next, type, member)
#define sheaf_list_for_each_safe(pos, tmp, h)                      \
	for ((pos) = (h)->next, (tmp) = (pos)->next; (pos) != (h); \
	     (pos) = (tmp), (tmp) = (pos)->next)

#endif /* SHEAF_LIST_H */
