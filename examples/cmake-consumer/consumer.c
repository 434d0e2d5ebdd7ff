/* SPDX-License-Identifier: MIT */
/* A Sheaf cache from an application built with find_package(Sheaf CONFIG). */
#include <sheaf.h>
#include <sheaf_stats.h>
#include <stdio.h>
#include <string.h>

struct request {
	long id;
	char buf[200];
};

int main(void)
{
	enum {
		N = 1000
	};
	static struct request *r[N];
	struct sheaf_cache *rq = sheaf_cache_create("request", sizeof(struct request), NULL);
	if (!rq) {
		perror("sheaf_cache_create");
		return 1;
	}
	for (int i = 0; i < N; i++) {
		r[i] = sheaf_cache_alloc(rq);
		if (!r[i]) {
			perror("sheaf_cache_alloc");
			return 1;
		}
		r[i]->id = i;
	}
	struct sheaf_stats st = { .size = sizeof(st) };
	if (sheaf_stats_get(rq, &st) != 0 || strcmp(st.name, "request") != 0 ||
	    st.objects_inuse < N) {
		fprintf(stderr, "consumer: statistics do not show %d objects in use\n", N);
		return 1;
	}
	for (int i = 0; i < N; i++) {
		if (r[i]->id != i) {
			fprintf(stderr, "consumer: object %d overwritten\n", i);
			return 1;
		}
		sheaf_cache_free(rq, r[i]);
	}
	sheaf_cache_destroy(rq);
	printf("consumer: %d objects of cache 'request' allocated and freed\n", N);
	return 0;
}
