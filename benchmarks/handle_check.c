/* The cost of the C boundary's handle check (zig/src/store/registry.zig) on the smallest calls: two
 * builds of libloaderx loaded side by side, each over its own store of 4096 raw 64-byte
 * records, timed in alternating rounds on the thread's CPU clock (the machines are shared), and
 * the per-round ratio after/before reported.
 *
 *   python -m ziglang cc -O2 -o /tmp/handle_check benchmarks/handle_check.c -ldl
 *   mkdir -p /tmp/hc && /tmp/handle_check BEFORE.so AFTER.so /tmp/hc
 *
 * BEFORE.so and AFTER.so are two `python3 build.py native` libraries (loaderx/lib/); the
 * scratch folder must not hold the stores of an earlier run. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

typedef int (*open_fn)(const char *, uint32_t, void **);
typedef int (*append_fn)(void *, const uint8_t *, uint64_t, uint64_t, uint8_t, uint64_t *);
typedef int (*gather_fn)(void *, const int64_t *, uint64_t, uint8_t *, uint64_t);
typedef int (*view_open_fn)(void *const *, uint64_t, void **);
typedef void (*close_fn)(void *);
typedef uint64_t (*length_fn)(void *);

struct lib { const char *name; gather_fn store_gather, view_gather; void *store, *view; close_fn store_close, view_close; length_fn store_length; };

static void *sym(void *h, const char *n) { void *p = dlsym(h, n); if (!p) { fprintf(stderr, "no %s\n", n); exit(1); } return p; }

static void setup(struct lib *l, const char *path, const char *folder) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); exit(1); }
    mkdir(folder, 0755);
    if (((open_fn)sym(h, "lx_store_open"))(folder, 1, &l->store) != 0) exit(2);
    static uint8_t data[4096 * 64];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i / 64);
    uint64_t first;
    if (((append_fn)sym(h, "lx_store_append_fixed"))(l->store, data, 64, 4096, 0, &first) != 0) exit(3);
    if (((view_open_fn)sym(h, "lx_view_open"))(&l->store, 1, &l->view) != 0) exit(4);
    l->store_gather = (gather_fn)sym(h, "lx_store_gather_fixed");
    l->view_gather = (gather_fn)sym(h, "lx_view_gather_fixed");
    l->store_close = (close_fn)sym(h, "lx_store_close");
    l->view_close = (close_fn)sym(h, "lx_view_close");
    l->store_length = (length_fn)sym(h, "lx_store_length");
}

static double now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec * 1e9 + t.tv_nsec; }

static double round_ns(gather_fn g, void *h, int n) {
    uint8_t out[64];
    double t0 = now();
    for (int i = 0; i < n; i++) {
        int64_t index = (i * 2654435761u) & 4095;
        if (g(h, &index, 1, out, 64) != 0) exit(5);
    }
    return (now() - t0) / n;
}

static double length_ns(length_fn f, void *h, int n) {
    uint64_t sum = 0;
    double t0 = now();
    for (int i = 0; i < n; i++) sum += f(h);
    if (sum != (uint64_t)n * 4096) exit(6);
    return (now() - t0) / n;
}

static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: %s before.so after.so scratch-folder\n", argv[0]); return 1; }
    struct lib libs[2] = {{.name = "before"}, {.name = "after"}};
    char folder[4096];
    for (int k = 0; k < 2; k++) { snprintf(folder, sizeof folder, "%s/%s", argv[3], libs[k].name); setup(&libs[k], argv[1 + k], folder); }
    enum { rounds = 41, calls = 200000 };
    for (int v = 0; v < 3; v++) {
        double ns[2][rounds];
        for (int r = 0; r < rounds; r++)
            for (int k = 0; k < 2; k++) {
                int kk = (r % 2) ? 1 - k : k; /* alternate which build goes first */
                ns[kk][r] = v == 2 ? length_ns(libs[kk].store_length, libs[kk].store, calls * 10)
                                   : round_ns(v ? libs[kk].view_gather : libs[kk].store_gather, v ? libs[kk].view : libs[kk].store, calls);
            }
        double ratios[rounds];
        for (int r = 0; r < rounds; r++) ratios[r] = ns[1][r] / ns[0][r];
        qsort(ns[0], rounds, sizeof(double), cmp); qsort(ns[1], rounds, sizeof(double), cmp); qsort(ratios, rounds, sizeof(double), cmp);
        printf("%s: before %.1f ns, after %.1f ns (medians of %d rounds of %d calls); after/before per round: median %.3f, min %.3f, max %.3f\n",
               v == 2 ? "lx_store_length (the handle check alone)" : v ? "lx_view_gather_fixed, 1 record " : "lx_store_gather_fixed, 1 record", ns[0][rounds / 2], ns[1][rounds / 2], rounds, v == 2 ? calls * 10 : calls, ratios[rounds / 2], ratios[0], ratios[rounds - 1]);
    }
    for (int k = 0; k < 2; k++) { libs[k].view_close(libs[k].view); libs[k].store_close(libs[k].store); }
    return 0;
}
