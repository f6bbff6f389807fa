/* Communicator entry points of a build without MPI: each says so (fail-closed, no single-rank stand-in). */
#ifndef H3S_WITH_MPI
#include "core/core.h"
#include "dist/comm.h"

#define NO_MPI "this build has no MPI communicator (Open MPI was not found when it was configured)"

int h3s_comm_mpi_built(void) { return 0; }
h3s_status h3s_comm_mpi_world(int *argc, char ***argv, h3s_comm **out) {
    (void)argc, (void)argv;
    if (out) *out = NULL;
    return h3s_fail(H3S_ERR_UNSUPPORTED, "%s", NO_MPI);
}
void h3s_comm_free(h3s_comm *c) { (void)c; }
int h3s_comm_rank(const h3s_comm *c) { return c ? c->rank : 0; }
int h3s_comm_size(const h3s_comm *c) { return c ? c->size : 1; }
h3s_status h3s_comm_agree(h3s_comm *c, h3s_status local, int *failed_rank) {
    (void)c;
    if (failed_rank) *failed_rank = local == H3S_OK ? -1 : 0;
    return local;
}
void h3s_comm_abort(h3s_comm *c, int code) { (void)c, (void)code; }
h3s_status h3s_comm_allgatherv(h3s_comm *c, const void *send, void *recv, const size_t *counts, const size_t *displs) {
    (void)c, (void)send, (void)recv, (void)counts, (void)displs;
    return h3s_fail(H3S_ERR_UNSUPPORTED, "%s", NO_MPI);
}
h3s_status h3s_comm_alltoallv(h3s_comm *c, const void *send, const size_t *scounts, const size_t *sdispls, void *recv,
                              const size_t *rcounts, const size_t *rdispls) {
    (void)c, (void)send, (void)scounts, (void)sdispls, (void)recv, (void)rcounts, (void)rdispls;
    return h3s_fail(H3S_ERR_UNSUPPORTED, "%s", NO_MPI);
}
h3s_status h3s_comm_send(h3s_comm *c, const void *buf, size_t nbytes, int to) {
    (void)c, (void)buf, (void)nbytes, (void)to;
    return h3s_fail(H3S_ERR_UNSUPPORTED, "%s", NO_MPI);
}
h3s_status h3s_comm_recv(h3s_comm *c, void *buf, size_t nbytes, int from) {
    (void)c, (void)buf, (void)nbytes, (void)from;
    return h3s_fail(H3S_ERR_UNSUPPORTED, "%s", NO_MPI);
}
h3s_status h3s_comm_split(h3s_comm *c, int color, int key, h3s_comm **out) {
    (void)c, (void)color, (void)key;
    if (out) *out = NULL;
    return h3s_fail(H3S_ERR_UNSUPPORTED, "%s", NO_MPI);
}
h3s_status h3s_comm_bcast(h3s_comm *c, void *buf, size_t nbytes, int root) {
    (void)c, (void)buf, (void)nbytes, (void)root;
    return h3s_fail(H3S_ERR_UNSUPPORTED, "%s", NO_MPI);
}
#endif
