/* The temporaries this process is writing (atomic writes' files, init's directories), kept so that a process ending
 * on a signal can remove them (h3s_io_remove_temporaries, include/h3s_io.h).  A fixed table under one mutex: init
 * publishes its directory under the same mutex, so a removal runs either wholly before the publication (which then
 * does not happen) or wholly after it (when the directory holds the replaced model, to be discarded anyway). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "io/modeldir.h"
#include "io/safetensors.h"

#define TEMP_SLOTS 64
#define TEMP_PATH_MAX 4096

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_ended; /* h3s_io_remove_temporaries ran: no temporary is made and nothing is published any more */
static struct {
    int live, dir;
    char path[TEMP_PATH_MAX];
} g_slots[TEMP_SLOTS];

void h3s_io_temp_lock(void) { pthread_mutex_lock(&g_lock); }
void h3s_io_temp_unlock(void) { pthread_mutex_unlock(&g_lock); }
int h3s_io_temp_ended_locked(void) { return g_ended; }

void h3s_io_temp_remember_locked(const char *path, int dir) {
    size_t n = strlen(path);
    if (n >= TEMP_PATH_MAX) return; /* not remembered: only a process ending on a signal leaves it behind */
    for (int i = 0; i < TEMP_SLOTS; i++) {
        if (g_slots[i].live) continue;
        memcpy(g_slots[i].path, path, n + 1);
        g_slots[i].dir = dir;
        g_slots[i].live = 1;
        return;
    } /* every slot taken: likewise */
}

void h3s_io_temp_forget_locked(const char *path) {
    for (int i = 0; i < TEMP_SLOTS; i++)
        if (g_slots[i].live && strcmp(g_slots[i].path, path) == 0) g_slots[i].live = 0;
}

void h3s_io_temp_forget(const char *path) {
    h3s_io_temp_lock();
    h3s_io_temp_forget_locked(path);
    h3s_io_temp_unlock();
}

/* Made and remembered under the lock, so that a removal sees either nothing or the remembered temporary. */
int h3s_io_temp_make(const char *path, int dir) {
    h3s_io_temp_lock();
    int r = -1, err = ECANCELED;
    if (!g_ended) {
        r = dir ? mkdir(path, 0777) : open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        err = errno;
        if (r >= 0) h3s_io_temp_remember_locked(path, dir);
    }
    h3s_io_temp_unlock();
    errno = err;
    return r;
}

void h3s_io_remove_temporaries(void) {
    h3s_io_temp_lock();
    g_ended = 1;
    for (int i = 0; i < TEMP_SLOTS; i++) {
        if (!g_slots[i].live) continue;
        g_slots[i].live = 0;
        if (g_slots[i].dir)
            h3s_io_remove_tree_flat(g_slots[i].path); /* as init removes it itself on failure */
        else
            unlink(g_slots[i].path);
    }
    h3s_io_temp_unlock();
}
