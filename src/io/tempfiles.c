/* The temporaries this process is writing (atomic writes' files, init's directories), kept where a signal handler can
 * remove them (h3s_io_remove_temporaries, include/h3s_io.h).  A fixed table of slots, each a path copied in and a
 * state changed atomically: nothing a handler reads is ever freed, and the handler calls only unlink and rmdir. */
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "io/modeldir.h"
#include "io/safetensors.h"

#define TEMP_SLOTS 64
#define TEMP_PATH_MAX 4096

enum { SLOT_FREE, SLOT_BUSY, SLOT_LIVE };

static struct {
    atomic_int state; /* SLOT_FREE, SLOT_BUSY (being filled or emptied), SLOT_LIVE (path is complete) */
    int dir;
    char path[TEMP_PATH_MAX];
} g_slots[TEMP_SLOTS];

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the signal handler reads the slots' states: they must be lock-free");

void h3s_io_temp_remember(const char *path, int dir) {
    size_t n = strlen(path);
    if (n >= TEMP_PATH_MAX) return; /* not remembered: only a killed process leaves it behind, as before */
    for (int i = 0; i < TEMP_SLOTS; i++) {
        int expect = SLOT_FREE;
        if (!atomic_compare_exchange_strong(&g_slots[i].state, &expect, SLOT_BUSY)) continue;
        memcpy(g_slots[i].path, path, n + 1);
        g_slots[i].dir = dir;
        atomic_store(&g_slots[i].state, SLOT_LIVE);
        return;
    }
}

void h3s_io_temp_forget(const char *path) {
    for (int i = 0; i < TEMP_SLOTS; i++) {
        int expect = SLOT_LIVE;
        if (atomic_load(&g_slots[i].state) != SLOT_LIVE || strcmp(g_slots[i].path, path) != 0) continue;
        if (atomic_compare_exchange_strong(&g_slots[i].state, &expect, SLOT_BUSY)) {
            atomic_store(&g_slots[i].state, SLOT_FREE);
            return;
        }
    }
}

/* dir + "/" + name into buf (async-signal-safe: no library call); 0 when it does not fit */
static int join(char *buf, size_t cap, const char *dir, const char *name) {
    size_t a = 0, b = 0;
    while (dir[a])
        a++;
    while (name[b])
        b++;
    if (a + 1 + b + 1 > cap) return 0;
    for (size_t i = 0; i < a; i++)
        buf[i] = dir[i];
    buf[a] = '/';
    for (size_t i = 0; i <= b; i++)
        buf[a + 1 + i] = name[i];
    return 1;
}

void h3s_io_remove_temporaries(void) {
    static const char *const children[] = {H3S_MODEL_CONFIG_FILE, H3S_MODEL_WEIGHTS_FILE};
    char buf[TEMP_PATH_MAX + 64];
    /* files first: an init's weights are written as a temporary file inside its temporary directory */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < TEMP_SLOTS; i++) {
            if (atomic_load(&g_slots[i].state) != SLOT_LIVE || g_slots[i].dir != pass) continue;
            if (!pass) {
                unlink(g_slots[i].path);
                continue;
            }
            for (size_t c = 0; c < sizeof children / sizeof children[0]; c++)
                if (join(buf, sizeof buf, g_slots[i].path, children[c])) unlink(buf);
            rmdir(g_slots[i].path);
        }
    }
}
