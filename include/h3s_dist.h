/* h3strict public API: communicators (MPI over host memory, NCCL over device memory) and parallel execution
 * (docs/ARCHITECTURE.md, "Sequence- and tensor-parallel execution").
 *
 * A communicator only moves bytes between ranks (all-gather, all-to-all, broadcast): it never adds.  A model given
 * a communicator runs owner-computes: every output element is computed by one rank with exactly the operations and
 * order of one process, so the results are byte-identical to a single-process run whatever the world size.
 * Every rank makes the same calls in the same order (forward, backward, node hooks set or not set alike). */
#ifndef H3S_PUBLIC_DIST_H
#define H3S_PUBLIC_DIST_H

#include "h3s.h"
#include "h3s_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct h3s_comm h3s_comm;

/* 1 when this build has the MPI communicator (found at configure time), 0 otherwise. */
H3S_API int h3s_comm_mpi_built(void);
/* The MPI world as a communicator.  Initialises MPI when nobody has (then h3s_comm_free finalises it); argc/argv
 * may be NULL.  A build without MPI returns H3S_ERR_UNSUPPORTED saying so. */
H3S_API h3s_status h3s_comm_mpi_world(int *argc, char ***argv, h3s_comm **out);
H3S_API void h3s_comm_free(h3s_comm *c);

/* 1 when this build has the NCCL communicator (a CUDA build that found NCCL's header and library), 0 otherwise. */
H3S_API int h3s_comm_nccl_built(void);
/* An NCCL communicator over CUDA device memory whose ranks are those of the MPI communicator `mpi` (rank 0 makes
 * NCCL's unique id and `mpi` broadcasts it), or a world of one on this process's GPU when mpi == NULL.  It moves
 * device buffers only; h3s_comm_agree needs the MPI one.  Without a GPU H3S_ERR_DEVICE; in a build without NCCL
 * H3S_ERR_UNSUPPORTED, saying so. */
H3S_API h3s_status h3s_comm_nccl_create(h3s_comm *mpi, h3s_comm **out);
H3S_API int h3s_comm_rank(const h3s_comm *c);
H3S_API int h3s_comm_size(const h3s_comm *c);

/* All-gather of bytes, a collective call: recv receives the concatenation over ranks r of counts[r] bytes placed at
 * recv + displs[r]; this rank sends counts[rank] bytes from send.  counts and displs have h3s_comm_size entries and
 * are the same on every rank; host memory for the MPI communicator, device memory for NCCL.  It only copies. */
H3S_API h3s_status h3s_comm_allgatherv(h3s_comm *c, const void *send, void *recv, const size_t *counts,
                                       const size_t *displs);

/* Collective agreement on a status: every rank passes its own (and leaves its message in h3s_last_error when it is
 * not H3S_OK).  Returns H3S_OK when every rank passed H3S_OK; otherwise every rank returns the status of the
 * lowest failing rank, whose message becomes the error message ("rank R: message"), and *failed_rank (may be NULL)
 * names that rank.  A communication failure is H3S_ERR_DEVICE. */
H3S_API h3s_status h3s_comm_agree(h3s_comm *c, h3s_status local, int *failed_rank);
/* End every rank of the communicator now with exit code `code` (MPI_Abort): for a failure inside a collective
 * pass, after which the other ranks could wait forever.  An NCCL communicator is aborted (ncclCommAbort) and this
 * process exits with `code`; under mpirun, a rank that exits without finalising MPI makes mpirun end the others. */
H3S_API void h3s_comm_abort(h3s_comm *c, int code);

/* Run the model's passes over `comm` as sp sequence-parallel ranks x tp tensor-parallel ranks (sp * tp must equal
 * the communicator's size; rank = sp rank * tp + tp rank).  Every rank is given the same weights and inputs; in
 * every transformer block each computes the packed rows of its sequence slice and, of those, the heads and
 * columns of its tensor slice (it copies its slices of the block weights here), and every rank returns the same,
 * complete outputs and gradients, byte-identical to the model without a communicator.  Strict CPU models only;
 * tp may not exceed the heads or the hidden, FFN or time-embedding width.
 * comm == NULL returns the model to single-process execution.  The communicator must outlive its use.  A collective
 * call: its local steps are agreed (h3s_comm_agree) before each exchange, so a rank that fails alone makes every
 * rank fail with its message.  A tape made before a change of the set-up is refused by h3s_model_backward (run the
 * forward again). */
H3S_API h3s_status h3s_model_set_parallel(h3s_model *m, h3s_comm *comm, int sp, int tp);

/* Whether a model of config c can run on sp x tp ranks: tp at most the heads and the hidden, FFN and
 * time-embedding widths, and, when packed_rows > 0, at least sp packed rows (B * S) in a pass to cut into sp
 * non-empty slices.  H3S_ERR_INVALID (tp) or H3S_ERR_SHAPE (rows) naming the limit.  A caller checks it, agreed,
 * before a pass whose failure would otherwise come from inside the collective pass. */
H3S_API h3s_status h3s_parallel_check(const h3s_config *c, int sp, int tp, int64_t packed_rows);

/* The same for every strict CPU model created from now on in this process (h3s_model_create, h3s_model_load, and
 * the models that h3s_trajectory and the replay create), as the thread count is process-wide.  Models of other
 * backends run whole on every rank.  comm == NULL ends it.  Creating a strict CPU model is then collective: every
 * rank's status is agreed before the set-up, so one rank's failure (a bad path, memory) is every rank's. */
H3S_API h3s_status h3s_set_parallel(h3s_comm *comm, int sp, int tp);

#ifdef __cplusplus
}
#endif
#endif
