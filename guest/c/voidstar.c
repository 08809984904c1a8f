/* A program instrumented as the Antithesis SDKs instrument one when /usr/lib/libvoidstar.so
 * exists: it loads the library with dlopen, looks up fuzz_json_data, fuzz_flush and
 * fuzz_get_random, and speaks through them only (catalog entries, evaluations, setup, an event,
 * random numbers). Dynamically linked, as most C programs ship.
 *
 *   voidstar           draws three random numbers; its Always fails when each is 0 mod 16
 *                      (one run in 4096), its Sometimes holds when the first is. Each draw is
 *                      tested in a branch of its own, so that coverage shows each step: an
 *                      explorer that steers the draws gets there far sooner than fresh seeds.
 *
 * Exit: 0 done, 3 the library or a symbol is missing. */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void (*json_data)(const char *, size_t);
static void (*flush)(void);

static void send(const char *message) {
    json_data(message, strlen(message));
    flush();
}

/* One assertion message: its catalog entry (hit false) or an evaluation. */
static void assertion(const char *type, const char *display, int must_hit, const char *message, int hit,
                      int condition, int line, const char *details) {
    char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"antithesis_assert\":{\"hit\":%s,\"must_hit\":%s,\"assert_type\":\"%s\",\"display_type\":\"%s\","
             "\"message\":\"%s\",\"condition\":%s,\"id\":\"%s\",\"location\":{\"class\":\"\",\"function\":\"main\","
             "\"file\":\"guest/c/voidstar.c\",\"begin_line\":%d,\"begin_column\":5},\"details\":%s}}",
             hit ? "true" : "false", must_hit ? "true" : "false", type, display, message,
             condition ? "true" : "false", message, line, details);
    send(buf);
}

int main(void) {
    void *lib = dlopen("/usr/lib/libvoidstar.so", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "voidstar: %s\n", dlerror());
        return 3;
    }
    json_data = (void (*)(const char *, size_t))dlsym(lib, "fuzz_json_data");
    flush = (void (*)(void))dlsym(lib, "fuzz_flush");
    uint64_t (*get_random)(void) = (uint64_t(*)(void))dlsym(lib, "fuzz_get_random");
    if (!json_data || !flush || !get_random) {
        fprintf(stderr, "voidstar: a symbol is missing\n");
        return 3;
    }
    send("{\"antithesis_sdk\":{\"language\":{\"name\":\"C\",\"version\":\"c11\"},\"sdk_version\":\"0.0.0\","
         "\"protocol_version\":\"1.1.0\"}}");
    assertion("always", "Always", 1, "not every draw is 0 mod 16", 0, 0, 90, "null");
    assertion("sometimes", "Sometimes", 1, "the first draw is 0 mod 16", 0, 0, 91, "null");
    send("{\"antithesis_setup\":{\"status\":\"complete\",\"details\":null}}");
    uint64_t d[3];
    for (int i = 0; i < 3; i++) {
        d[i] = get_random();
        printf("draw %d: %" PRIu64 "\n", i, d[i]);
    }
    int depth = 0;
    if (d[0] % 16 == 0) {
        depth = 1;
        puts("first");
        if (d[1] % 16 == 0) {
            depth = 2;
            puts("second");
            if (d[2] % 16 == 0) {
                depth = 3;
                puts("third");
            }
        }
    }
    char details[128];
    snprintf(details, sizeof details, "{\"depth\":%d}", depth);
    assertion("always", "Always", 1, "not every draw is 0 mod 16", 1, depth < 3, 90, details);
    assertion("sometimes", "Sometimes", 1, "the first draw is 0 mod 16", 1, depth >= 1, 91, details);
    send("{\"draws_done\":{\"depth\":0}}");
    return 0;
}
