/* Communicator entry points: argument checks, then the transport's table (dist/comm.h). */
#include "dist/comm.h"

#include "core/core.h"

static h3s_status usable(const h3s_comm *c, const char *op) {
    if (!c || !c->ops) return h3s_fail(H3S_ERR_INVALID, "comm_%s: NULL communicator", op);
    return H3S_OK;
}

static h3s_status peer(const h3s_comm *c, int r, const char *op) {
    if (r < 0 || r >= c->size) return h3s_fail(H3S_ERR_INDEX, "comm_%s: rank %d outside a world of %d", op, r, c->size);
    return H3S_OK;
}

int h3s_comm_rank(const h3s_comm *c) { return c ? c->rank : 0; }
int h3s_comm_size(const h3s_comm *c) { return c ? c->size : 1; }

void h3s_comm_free(h3s_comm *c) {
    if (!c) return;
    if (c->ops && c->ops->release) c->ops->release(c);
    free(c);
}

h3s_status h3s_comm_allgatherv(h3s_comm *c, const void *send, void *recv, const size_t *counts, const size_t *displs) {
    H3S_TRY(usable(c, "allgatherv"));
    if (!counts || !displs) return h3s_fail(H3S_ERR_INVALID, "comm_allgatherv: NULL counts");
    if (!send && counts[c->rank]) return h3s_fail(H3S_ERR_INVALID, "comm_allgatherv: NULL send buffer");
    for (int r = 0; !recv && r < c->size; r++)
        if (counts[r]) return h3s_fail(H3S_ERR_INVALID, "comm_allgatherv: NULL receive buffer");
    return c->ops->allgatherv(c, send, recv, counts, displs);
}

h3s_status h3s_comm_alltoallv(h3s_comm *c, const void *send, const size_t *scounts, const size_t *sdispls, void *recv,
                              const size_t *rcounts, const size_t *rdispls) {
    H3S_TRY(usable(c, "alltoallv"));
    if (!scounts || !sdispls || !rcounts || !rdispls) return h3s_fail(H3S_ERR_INVALID, "comm_alltoallv: NULL counts");
    for (int r = 0; r < c->size; r++)
        if ((!send && scounts[r]) || (!recv && rcounts[r]))
            return h3s_fail(H3S_ERR_INVALID, "comm_alltoallv: NULL %s buffer",
                            !send && scounts[r] ? "send" : "receive");
    return c->ops->alltoallv(c, send, scounts, sdispls, recv, rcounts, rdispls);
}

h3s_status h3s_comm_send(h3s_comm *c, const void *buf, size_t nbytes, int to) {
    H3S_TRY(usable(c, "send"));
    H3S_TRY(peer(c, to, "send"));
    if (!buf && nbytes) return h3s_fail(H3S_ERR_INVALID, "comm_send: NULL buffer");
    return c->ops->send(c, buf, nbytes, to);
}

h3s_status h3s_comm_recv(h3s_comm *c, void *buf, size_t nbytes, int from) {
    H3S_TRY(usable(c, "recv"));
    H3S_TRY(peer(c, from, "recv"));
    if (!buf && nbytes) return h3s_fail(H3S_ERR_INVALID, "comm_recv: NULL buffer");
    return c->ops->recv(c, buf, nbytes, from);
}

h3s_status h3s_comm_bcast(h3s_comm *c, void *buf, size_t nbytes, int root) {
    H3S_TRY(usable(c, "bcast"));
    H3S_TRY(peer(c, root, "bcast"));
    if (!buf && nbytes) return h3s_fail(H3S_ERR_INVALID, "comm_bcast: NULL buffer");
    return c->ops->bcast(c, buf, nbytes, root);
}

h3s_status h3s_comm_split(h3s_comm *c, int color, int key, h3s_comm **out) {
    if (out) *out = NULL;
    H3S_TRY(usable(c, "split"));
    if (!out) return h3s_fail(H3S_ERR_INVALID, "comm_split: NULL argument");
    return c->ops->split(c, color, key, out);
}

h3s_status h3s_comm_agree(h3s_comm *c, h3s_status local, int *failed_rank) {
    if (failed_rank) *failed_rank = -1;
    H3S_TRY(usable(c, "agree"));
    if (!c->ops->agree)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "comm_agree: the %s communicator agrees nothing (use its MPI one)",
                        c->ops->name);
    return c->ops->agree(c, local, failed_rank);
}

void h3s_comm_abort(h3s_comm *c, int code) {
    if (c && c->ops && c->ops->abort) c->ops->abort(c, code);
}
