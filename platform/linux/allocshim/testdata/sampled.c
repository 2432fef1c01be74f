/* Checks the allocation sampler without a recorder: this program
 * defines the sampler's two markers itself (exported with -rdynamic, the
 * executable's definitions come first in the lookup order, so the
 * sampler's calls land here) and sums what they report, unbiased as the
 * recorder does. Four threads each allocate TOTAL bytes in blocks of
 * BLOCK and keep every KEEP-th; calloc, realloc, posix_memalign and
 * aligned_alloc take a share. Prints: allocated-estimate kept-estimate
 * sampled-frees-of-unsampled-blocks (0), then the same for a forked
 * child, whose set starts empty. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TOTAL (256ull << 20)
#define BLOCK 4096u
#define KEEP 8
#define THREADS 4
#define NBLOCKS (TOTAL / BLOCK)

static double rate = 512 * 1024;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static double allocated, live;
static long bad_frees, sampled_n;

/* Sampled blocks, to find their sizes at free. */
#define MAXS 65536
static void *sblock[MAXS];
static double sweight[MAXS];

/* A queued free, as the sampler writes it. */
struct free_rec {
	unsigned long block, time;
	unsigned tid, pad;
};

static void freed(void *block)
{
	int found = 0;
	for (int i = 0; i < MAXS; i++)
		if (sblock[i] == block) {
			live -= sweight[i];
			sblock[i] = NULL;
			found = 1;
			break;
		}
	if (!found)
		bad_frees++;
}

void rawstack_free_sampled(const struct free_rec *frees, size_t n)
{
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < n; i++)
		freed((void *)frees[i].block);
	pthread_mutex_unlock(&mu);
}

void rawstack_alloc_sampled(void *block, size_t size, const struct free_rec *frees, size_t n)
{
	rawstack_free_sampled(frees, n);
	if (!block)
		return;
	double p = -expm1(-(double)size / rate);
	pthread_mutex_lock(&mu);
	allocated += size / p;
	live += size / p;
	for (int i = 0; i < MAXS; i++)
		if (!sblock[i]) {
			sblock[i] = block;
			sweight[i] = size / p;
			break;
		}
	sampled_n++;
	pthread_mutex_unlock(&mu);
}

static void *work(void *arg)
{
	(void)arg;
	void **kept = malloc(NBLOCKS / KEEP * sizeof(void *));
	size_t nk = 0;
	for (size_t i = 0; i < NBLOCKS; i++) {
		void *p;
		switch (i % 5) {
		case 0:
			p = calloc(1, BLOCK);
			break;
		case 1:
			p = realloc(malloc(BLOCK / 2), BLOCK); /* BLOCK/2 then BLOCK: counted below */
			break;
		case 2:
			if (posix_memalign(&p, 64, BLOCK))
				p = NULL;
			break;
		case 3:
			p = aligned_alloc(64, BLOCK);
			break;
		default:
			p = malloc(BLOCK);
		}
		if (!p)
			abort();
		memset(p, 1, 16);
		if (i % KEEP == 0)
			kept[nk++] = p;
		else
			free(p);
	}
	/* kept stays: its blocks are live at the end. */
	return kept;
}

static void run(const char *who)
{
	pthread_t t[THREADS];
	allocated = live = 0;
	bad_frees = 0;
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, work, NULL);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	/* printf allocates (stdout's buffer), which may be sampled: not
	 * under mu. */
	pthread_mutex_lock(&mu);
	double a = allocated, l = live;
	long b = bad_frees, n = sampled_n;
	pthread_mutex_unlock(&mu);
	printf("%s %.0f %.0f %ld %ld\n", who, a, l, b, n);
	fflush(stdout);
}

int main(void)
{
	const char *r = getenv("RAWSTACK_ALLOC_RATE");
	if (r)
		rate = atof(r);
	run("parent");
	pid_t pid = fork();
	if (pid == 0) {
		/* The parent's sampled blocks are not this child's: freeing
		 * them reports nothing. */
		pthread_mutex_lock(&mu);
		for (int i = 0; i < MAXS; i++)
			sblock[i] = NULL;
		sampled_n = 0;
		pthread_mutex_unlock(&mu);
		run("child");
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
