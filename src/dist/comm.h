/* The communicator: a world of ranks that moves bytes (include/h3s_dist.h).  One table of operations per transport:
 * comm_mpi.c (Open MPI, host memory; comm_none.c in builds without MPI) and comm_nccl.c (NCCL, CUDA device
 * memory, in CUDA builds that found NCCL).  Every operation is collective over the communicator's ranks with
 * matching sizes, in bytes, and only copies: none adds.  comm.c dispatches. */
#ifndef H3S_DIST_COMM_H
#define H3S_DIST_COMM_H

#include <stddef.h>

#include "h3s_dist.h"

typedef struct h3s_comm_ops {
    const char *name; /* "mpi", "nccl" */
    h3s_status (*allgatherv)(h3s_comm *c, const void *send, void *recv, const size_t *counts, const size_t *displs);
    h3s_status (*alltoallv)(h3s_comm *c, const void *send, const size_t *scounts, const size_t *sdispls, void *recv,
                            const size_t *rcounts, const size_t *rdispls);
    h3s_status (*send)(h3s_comm *c, const void *buf, size_t nbytes, int to);
    h3s_status (*recv)(h3s_comm *c, void *buf, size_t nbytes, int from);
    h3s_status (*bcast)(h3s_comm *c, void *buf, size_t nbytes, int root);
    h3s_status (*split)(h3s_comm *c, int color, int key, h3s_comm **out);
    h3s_status (*agree)(h3s_comm *c, h3s_status local, int *failed_rank); /* NULL: not on this transport */
    void (*abort)(h3s_comm *c, int code);
    void (*release)(h3s_comm *c); /* the transport's state (the struct itself is freed by h3s_comm_free) */
} h3s_comm_ops;

struct h3s_comm {
    int rank, size;
    int finalize; /* 1: this communicator initialised MPI and finalises it when freed */
    int device;   /* 1: the buffers it moves are CUDA device memory */
    void *impl;   /* transport state */
    const h3s_comm_ops *ops;
};

/* h3s_comm_allgatherv (recv = the concatenation over ranks r of counts[r] bytes at displs[r]) is public
 * (include/h3s_dist.h). */
/* This rank sends scounts[r] bytes from send + sdispls[r] to rank r and receives rcounts[r] bytes from rank r into
 * recv + rdispls[r]. */
h3s_status h3s_comm_alltoallv(h3s_comm *c, const void *send, const size_t *scounts, const size_t *sdispls, void *recv,
                              const size_t *rcounts, const size_t *rdispls);
/* Point to point: nbytes to rank `to` / from rank `from` (in order). */
h3s_status h3s_comm_send(h3s_comm *c, const void *buf, size_t nbytes, int to);
h3s_status h3s_comm_recv(h3s_comm *c, void *buf, size_t nbytes, int from);
/* MPI_Comm_split: the ranks of c with the same color, ordered by key (then by rank), as a new communicator (freed
 * with h3s_comm_free; it never finalises MPI). */
h3s_status h3s_comm_split(h3s_comm *c, int color, int key, h3s_comm **out);
/* nbytes at buf from rank root to every rank. */
h3s_status h3s_comm_bcast(h3s_comm *c, void *buf, size_t nbytes, int root);

#endif
