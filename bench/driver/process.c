/* SPDX-License-Identifier: MIT */
/*
 * process.c - child processes (a workload phase run in a fresh process, its
 * records read back from its stdout) and this process's memory figures
 * (VmRSS, VmHWM) from /proc.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver.h"

/* ---- children ---------------------------------------------------------------- */

static int parse_record(struct bench_ctx *ctx, char *line)
{
	char *f[16];
	int nf = 0;
	struct bench_stat st;

	for (char *s = line, *save = NULL; nf < 16; s = NULL) {
		char *tok = strtok_r(s, "\t\n", &save);

		if (!tok)
			break;
		f[nf++] = tok;
	}
	if (nf == 3 && !strcmp(f[0], "N")) {
		bench_note(ctx, f[1], "%s", f[2]);
		return 0;
	}
	if (nf == 6 && !strcmp(f[0], "P")) {
		bench_profile(ctx, f[1], f[2], f[3], f[4], f[5]);
		return 0;
	}
	if (nf != 16 || strcmp(f[0], "R"))
		return -1;
	st.dropped = atoi(f[14]);
	st.disturbed = atoi(f[15]);
	st.n = atoi(f[7]);
	st.min = strtod(f[8], NULL);
	st.p10 = strtod(f[9], NULL);
	st.p25 = strtod(f[10], NULL);
	st.med = strtod(f[11], NULL);
	st.p75 = strtod(f[12], NULL);
	st.max = strtod(f[13], NULL);
	bench_record(ctx, f[1], f[2], f[3], f[4], f[5], (enum bench_head)atoi(f[6]), &st);
	return 0;
}

int bench_spawn_child(struct bench_ctx *ctx, const char *wl, const char *arg,
		      const char *const *env)
{
	char childarg[512], allocs[1024];
	int fd[2], status = 0;
	FILE *in;
	char line[2048];
	pid_t pid;

	snprintf(childarg, sizeof(childarg), "--child=%s:%s", wl, arg ? arg : "");
	snprintf(allocs, sizeof(allocs), "--allocs=%s", ctx->allocs ? ctx->allocs : "");
	if (pipe(fd))
		return -1;
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		close(fd[0]);
		close(fd[1]);
		return -1;
	}
	if (pid == 0) {
		char *argv[6];
		int a = 0;

		dup2(fd[1], STDOUT_FILENO);
		close(fd[0]);
		close(fd[1]);
		for (const char *const *e = env; e && *e; e++)
			putenv((char *)*e);
		argv[a++] = (char *)ctx->self_exe;
		argv[a++] = childarg;
		if (ctx->quick)
			argv[a++] = (char *)"--quick";
		if (ctx->allocs)
			argv[a++] = allocs;
		argv[a] = NULL;
		execv(ctx->self_exe, argv);
		_exit(127);
	}
	close(fd[1]);
	in = fdopen(fd[0], "r");
	if (!in) {
		close(fd[0]);
		waitpid(pid, &status, 0);
		return -1;
	}
	while (fgets(line, sizeof(line), in))
		parse_record(ctx, line);
	fclose(in);
	if (waitpid(pid, &status, 0) < 0)
		return -1;
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		bench_note(ctx, wl, "child %s:%s ended with %s %d", wl, arg ? arg : "",
			   WIFEXITED(status) ? "status" : "signal",
			   WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
		return -1;
	}
	return 0;
}

/* ---- memory ------------------------------------------------------------------ */

static long status_kib(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	size_t kl = strlen(key);
	long v = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, key, kl) && line[kl] == ':') {
			v = strtol(line + kl + 1, NULL, 10);
			break;
		}
	}
	fclose(f);
	return v;
}

long bench_rss_kib(void)
{
	return status_kib("VmRSS");
}

long bench_hwm_kib(void)
{
	return status_kib("VmHWM");
}

int bench_hwm_reset(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");
	int rc;

	if (!f)
		return -1;
	rc = fputs("5", f) < 0 ? -1 : 0;
	if (fclose(f))
		rc = -1;
	return rc;
}
