/* The NCCL communicator: CUDA device memory, bytes only (ncclUint8 broadcasts, sends and receives: never a
 * reduction).  Its ranks are those of an MPI communicator, which carries NCCL's unique id from rank 0 to the others
 * (or a world of one).  Every operation is queued on the CUDA backend's stream, then that stream is synchronised
 * (h3s_cuda_sync), so a buffer is ready when the call returns. */
#include "core/core.h"
#include "dist/comm.h"

#ifdef H3S_WITH_NCCL
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/cuda_internal.h"
#include "cuda/cuda_ops.h"

typedef struct nccl_impl {
    ncclComm_t comm;
} nccl_impl;

static const h3s_comm_ops nccl_ops;

static ncclComm_t ncomm(const h3s_comm *c) { return ((const nccl_impl *)c->impl)->comm; }
static cudaStream_t nstream(void) { return (cudaStream_t)h3c_stream(); }

static h3s_status nccl_fail(ncclResult_t r, const char *what) {
    return h3s_fail(H3S_ERR_DEVICE, "nccl: %s failed: %s", what, ncclGetErrorString(r));
}

/* The queued operations' result: NCCL's, then the stream's. */
static h3s_status finish(ncclResult_t r, const char *what) {
    if (r != ncclSuccess) return nccl_fail(r, what);
    return h3s_cuda_sync();
}

int h3s_comm_nccl_built(void) { return 1; }

static h3s_status nccl_allgatherv(h3s_comm *c, const void *send, void *recv, const size_t *counts,
                                  const size_t *displs) {
    ncclResult_t r = ncclGroupStart();
    for (int k = 0; r == ncclSuccess && k < c->size; k++) {
        if (!counts[k]) continue;
        char *dst = (char *)recv + displs[k];
        r = ncclBroadcast(k == c->rank ? send : dst, dst, counts[k], ncclUint8, k, ncomm(c), nstream());
    }
    ncclResult_t e = ncclGroupEnd();
    return finish(r != ncclSuccess ? r : e, "all-gather (grouped broadcasts)");
}

static h3s_status nccl_alltoallv(h3s_comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
                                 void *recv, const size_t *rcounts, const size_t *rdispls) {
    ncclResult_t r = ncclGroupStart();
    for (int k = 0; r == ncclSuccess && k < c->size; k++) {
        if (scounts[k]) r = ncclSend((const char *)send + sdispls[k], scounts[k], ncclUint8, k, ncomm(c), nstream());
        if (r == ncclSuccess && rcounts[k])
            r = ncclRecv((char *)recv + rdispls[k], rcounts[k], ncclUint8, k, ncomm(c), nstream());
    }
    ncclResult_t e = ncclGroupEnd();
    return finish(r != ncclSuccess ? r : e, "all-to-all (grouped sends and receives)");
}

static h3s_status nccl_send(h3s_comm *c, const void *buf, size_t nbytes, int to) {
    return finish(ncclSend(buf, nbytes, ncclUint8, to, ncomm(c), nstream()), "send");
}

static h3s_status nccl_recv(h3s_comm *c, void *buf, size_t nbytes, int from) {
    return finish(ncclRecv(buf, nbytes, ncclUint8, from, ncomm(c), nstream()), "receive");
}

static h3s_status nccl_bcast(h3s_comm *c, void *buf, size_t nbytes, int root) {
    return finish(ncclBroadcast(buf, buf, nbytes, ncclUint8, root, ncomm(c), nstream()), "broadcast");
}

static h3s_comm *wrap(ncclComm_t comm, h3s_status *st) {
    h3s_comm *c = h3s_calloc(1, sizeof *c);
    nccl_impl *impl = c ? h3s_calloc(1, sizeof *impl) : NULL;
    if (!impl) {
        free(c);
        ncclCommDestroy(comm);
        *st = H3S_ERR_NOMEM;
        return NULL;
    }
    impl->comm = comm;
    int rank = 0, size = 1;
    ncclResult_t r = ncclCommUserRank(comm, &rank);
    if (r == ncclSuccess) r = ncclCommCount(comm, &size);
    if (r != ncclSuccess) {
        *st = nccl_fail(r, "reading the communicator's rank");
        ncclCommDestroy(comm);
        free(impl);
        free(c);
        return NULL;
    }
    c->rank = rank;
    c->size = size;
    c->device = 1;
    c->impl = impl;
    c->ops = &nccl_ops;
    *st = H3S_OK;
    return c;
}

static h3s_status nccl_split(h3s_comm *c, int color, int key, h3s_comm **out) {
    ncclComm_t sub = NULL;
    ncclResult_t r = ncclCommSplit(ncomm(c), color, key, &sub, NULL);
    if (r != ncclSuccess) return nccl_fail(r, "ncclCommSplit");
    h3s_status st;
    *out = wrap(sub, &st);
    return st;
}

/* NCCL's abort ends the communicator, not the process: the handle forgets it (h3s_comm_free must not destroy it
 * again) and the process ends with `code`, as h3s_comm_abort promises.  Under mpirun a rank that exits without
 * finalising MPI makes mpirun end the others. */
static void nccl_abort(h3s_comm *c, int code) {
    nccl_impl *impl = c->impl;
    if (impl && impl->comm) {
        ncclCommAbort(impl->comm);
        impl->comm = NULL;
    }
    fflush(NULL);
    exit(code);
}

static void nccl_release(h3s_comm *c) {
    nccl_impl *impl = c->impl;
    if (impl && impl->comm) ncclCommDestroy(impl->comm);
    free(impl);
    c->impl = NULL;
}

h3s_status h3s_comm_nccl_create(h3s_comm *mpi, h3s_comm **out) {
    if (!out) return h3s_fail(H3S_ERR_INVALID, "comm_nccl_create: NULL argument");
    *out = NULL;
    if (mpi && mpi->device)
        return h3s_fail(H3S_ERR_INVALID, "comm_nccl_create: the bootstrap communicator must be a host (MPI) one");
    h3s_status st = h3s_cuda_available() ? H3S_OK : H3S_ERR_DEVICE; /* leaves the reason */
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    int rank = mpi ? mpi->rank : 0, size = mpi ? mpi->size : 1;
    if (st == H3S_OK && rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) st = nccl_fail(r, "ncclGetUniqueId");
    }
    if (mpi) {
        /* every rank learns whether the id exists, then receives it: NCCL's bootstrap goes through MPI */
        st = h3s_comm_agree(mpi, st, NULL);
        if (st == H3S_OK) st = h3s_comm_bcast(mpi, &id, sizeof id, 0);
    }
    if (st != H3S_OK) return h3s_fail_context(st, "NCCL communicator");
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRank(&comm, size, id, rank);
    if (r != ncclSuccess) return nccl_fail(r, "ncclCommInitRank");
    *out = wrap(comm, &st);
    return st;
}

static const h3s_comm_ops nccl_ops = {"nccl",     nccl_allgatherv, nccl_alltoallv, nccl_send,  nccl_recv,
                                      nccl_bcast, nccl_split,      NULL,           nccl_abort, nccl_release};

#else

int h3s_comm_nccl_built(void) { return 0; }

h3s_status h3s_comm_nccl_create(h3s_comm *mpi, h3s_comm **out) {
    (void)mpi;
    if (out) *out = NULL;
    return h3s_fail(H3S_ERR_UNSUPPORTED, "this build has no NCCL communicator (a CUDA build that finds nccl.h and "
                                         "libnccl builds it)");
}

#endif
