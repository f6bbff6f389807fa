/* The MPI entry points of a build without MPI: each says so (fail-closed, no single-rank stand-in). */
#ifndef H3S_WITH_MPI
#include "core/core.h"
#include "dist/comm.h"

int h3s_comm_mpi_built(void) { return 0; }

h3s_status h3s_comm_mpi_world(int *argc, char ***argv, h3s_comm **out) {
    (void)argc, (void)argv;
    if (out) *out = NULL;
    return h3s_fail(H3S_ERR_UNSUPPORTED,
                    "this build has no MPI communicator (Open MPI was not found when it was configured)");
}
#endif
