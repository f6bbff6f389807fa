/* The MPI communicator (Open MPI): host memory, bytes only.  Collectives are MPI_Allgatherv, MPI_Alltoallv and
 * MPI_Bcast on MPI_BYTE: copies, never reductions (no MPI_Allreduce anywhere), so no rank's arithmetic depends on
 * the world size.  Errors return (MPI_ERRORS_RETURN) and become H3S_ERR_DEVICE with MPI's own message. */
#ifdef H3S_WITH_MPI
#include <limits.h>
#include <mpi.h>
#include <stdio.h>

#include "core/core.h"
#include "dist/comm.h"

typedef struct mpi_impl {
    MPI_Comm comm;
} mpi_impl;

static MPI_Comm comm_of(const h3s_comm *c) { return ((const mpi_impl *)c->impl)->comm; }

static const h3s_comm_ops mpi_ops;

static h3s_status mpi_fail(int rc, const char *what) {
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return h3s_fail(H3S_ERR_DEVICE, "mpi: %s failed: %s", what, text);
}

int h3s_comm_mpi_built(void) { return 1; }

h3s_status h3s_comm_mpi_world(int *argc, char ***argv, h3s_comm **out) {
    if (!out) return h3s_fail(H3S_ERR_INVALID, "comm_mpi_world: NULL argument");
    *out = NULL;
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized) return h3s_fail(H3S_ERR_INVALID, "comm_mpi_world: MPI was already finalised in this process");
    int finalize = 0;
    if (!inited) {
        int rc = MPI_Init(argc, argv);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Init");
        finalize = 1;
    }
    h3s_comm *c = h3s_calloc(1, sizeof *c);
    mpi_impl *impl = c ? h3s_calloc(1, sizeof *impl) : NULL;
    if (!impl) {
        free(c);
        if (finalize) MPI_Finalize();
        return H3S_ERR_NOMEM;
    }
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &impl->comm);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(impl->comm, &c->rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(impl->comm, &c->size);
    if (rc != MPI_SUCCESS) {
        h3s_status st = mpi_fail(rc, "setting up the world communicator");
        free(impl);
        free(c);
        if (finalize) MPI_Finalize();
        return st;
    }
    c->impl = impl;
    c->ops = &mpi_ops;
    c->finalize = finalize;
    *out = c;
    return H3S_OK;
}

static void mpi_release(h3s_comm *c) {
    mpi_impl *impl = c->impl;
    if (impl) MPI_Comm_free(&impl->comm);
    if (c->finalize) MPI_Finalize();
    free(impl);
    c->impl = NULL;
}

static void mpi_abort(h3s_comm *c, int code) {
    if (c->impl) MPI_Abort(comm_of(c), code);
}

/* MPI counts are int: a larger message is refused, never cut. */
static h3s_status to_ints(const h3s_comm *c, const size_t *bytes, int *out, const char *what) {
    for (int r = 0; r < c->size; r++) {
        if (bytes[r] > (size_t)INT_MAX)
            return h3s_fail(H3S_ERR_UNSUPPORTED,
                            "mpi: %s of %zu bytes for rank %d exceeds the 2 GiB an MPI count holds", what, bytes[r], r);
        out[r] = (int)bytes[r];
    }
    return H3S_OK;
}

static h3s_status mpi_allgatherv(h3s_comm *c, const void *send, void *recv, const size_t *counts,
                                 const size_t *displs) {
    int *ic = h3s_malloc((size_t)c->size * 2, sizeof(int));
    if (!ic) return H3S_ERR_NOMEM;
    h3s_status st = to_ints(c, counts, ic, "all-gather");
    if (st == H3S_OK) st = to_ints(c, displs, ic + c->size, "all-gather offset");
    if (st == H3S_OK) {
        int rc = MPI_Allgatherv(send, ic[c->rank], MPI_BYTE, recv, ic, ic + c->size, MPI_BYTE, comm_of(c));
        if (rc != MPI_SUCCESS) st = mpi_fail(rc, "MPI_Allgatherv");
    }
    free(ic);
    return st;
}

static h3s_status mpi_alltoallv(h3s_comm *c, const void *send, const size_t *scounts, const size_t *sdispls, void *recv,
                                const size_t *rcounts, const size_t *rdispls) {
    int *ic = h3s_malloc((size_t)c->size * 4, sizeof(int));
    if (!ic) return H3S_ERR_NOMEM;
    int n = c->size;
    h3s_status st = to_ints(c, scounts, ic, "all-to-all");
    if (st == H3S_OK) st = to_ints(c, sdispls, ic + n, "all-to-all offset");
    if (st == H3S_OK) st = to_ints(c, rcounts, ic + 2 * n, "all-to-all");
    if (st == H3S_OK) st = to_ints(c, rdispls, ic + 3 * n, "all-to-all offset");
    if (st == H3S_OK) {
        int rc = MPI_Alltoallv(send, ic, ic + n, MPI_BYTE, recv, ic + 2 * n, ic + 3 * n, MPI_BYTE, comm_of(c));
        if (rc != MPI_SUCCESS) st = mpi_fail(rc, "MPI_Alltoallv");
    }
    free(ic);
    return st;
}

static h3s_status mpi_send(h3s_comm *c, const void *buf, size_t nbytes, int to) {
    if (nbytes > (size_t)INT_MAX)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "mpi: a message of %zu bytes exceeds the 2 GiB an MPI count holds",
                        nbytes);
    int rc = MPI_Send(buf, (int)nbytes, MPI_BYTE, to, 0, comm_of(c));
    return rc == MPI_SUCCESS ? H3S_OK : mpi_fail(rc, "MPI_Send");
}

static h3s_status mpi_recv(h3s_comm *c, void *buf, size_t nbytes, int from) {
    if (nbytes > (size_t)INT_MAX)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "mpi: a message of %zu bytes exceeds the 2 GiB an MPI count holds",
                        nbytes);
    MPI_Status status;
    int rc = MPI_Recv(buf, (int)nbytes, MPI_BYTE, from, 0, comm_of(c), &status);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Recv");
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    if ((size_t)got != nbytes)
        return h3s_fail(H3S_ERR_DEVICE, "mpi: rank %d sent %d bytes where %zu were expected", from, got, nbytes);
    return H3S_OK;
}

static h3s_status mpi_split(h3s_comm *c, int color, int key, h3s_comm **out) {
    h3s_comm *s = h3s_calloc(1, sizeof *s);
    mpi_impl *impl = s ? h3s_calloc(1, sizeof *impl) : NULL;
    if (!impl) {
        free(s);
        return H3S_ERR_NOMEM;
    }
    int rc = MPI_Comm_split(comm_of(c), color, key, &impl->comm);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(impl->comm, &s->rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(impl->comm, &s->size);
    if (rc != MPI_SUCCESS) {
        free(impl);
        free(s);
        return mpi_fail(rc, "MPI_Comm_split");
    }
    s->impl = impl;
    s->ops = &mpi_ops;
    *out = s;
    return H3S_OK;
}

static h3s_status mpi_bcast(h3s_comm *c, void *buf, size_t nbytes, int root) {
    if (nbytes > (size_t)INT_MAX)
        return h3s_fail(H3S_ERR_UNSUPPORTED, "mpi: broadcast of %zu bytes exceeds the 2 GiB an MPI count holds",
                        nbytes);
    int rc = MPI_Bcast(buf, (int)nbytes, MPI_BYTE, root, comm_of(c));
    return rc == MPI_SUCCESS ? H3S_OK : mpi_fail(rc, "MPI_Bcast");
}

/* Every rank's status and message, gathered (a copy): the lowest failing rank decides. */
#define AGREE_MSG 480
typedef struct agree_rec {
    int32_t status;
    char msg[AGREE_MSG];
} agree_rec;

static h3s_status mpi_agree(h3s_comm *c, h3s_status local, int *failed_rank) {
    agree_rec mine;
    memset(&mine, 0, sizeof mine);
    mine.status = (int32_t)local;
    if (local != H3S_OK) snprintf(mine.msg, sizeof mine.msg, "%s", h3s_last_error());
    agree_rec *all = h3s_malloc((size_t)c->size, sizeof *all);
    if (!all) {
        /* returning would leave the other ranks waiting in the gather for ever: end them all, saying why */
        fprintf(stderr, "h3strict: rank %d: out of memory agreeing on a status over %d ranks; ending every rank\n",
                c->rank, c->size);
        fflush(stderr);
        MPI_Abort(comm_of(c), 4);
        return H3S_ERR_NOMEM;
    }
    int rc = MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, comm_of(c));
    if (rc != MPI_SUCCESS) {
        free(all);
        return mpi_fail(rc, "MPI_Allgather (agreeing on a status)");
    }
    h3s_status st = H3S_OK;
    for (int r = 0; r < c->size; r++) {
        if (all[r].status == H3S_OK) continue;
        all[r].msg[AGREE_MSG - 1] = '\0';
        st = h3s_fail((h3s_status)all[r].status, "rank %d: %s", r, all[r].msg);
        if (failed_rank) *failed_rank = r;
        break;
    }
    free(all);
    return st;
}

static const h3s_comm_ops mpi_ops = {"mpi",     mpi_allgatherv, mpi_alltoallv, mpi_send,  mpi_recv,
                                     mpi_bcast, mpi_split,      mpi_agree,     mpi_abort, mpi_release};
#endif
