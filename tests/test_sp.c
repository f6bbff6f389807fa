/* Sequence- and tensor-parallel execution is byte-equal to one process (docs/strict.md, contract 3;
 * docs/ARCHITECTURE.md).
 *
 * Run plainly, the test launches itself under mpirun at 2, 3 and 4 ranks (--oversubscribe, one thread per rank)
 * and runs every (sp, tp) whose product is the world.
 * Each rank runs every case twice, alone (no communicator) and as one part of the world, and compares the
 * outputs, the input gradients, every parameter gradient and the SHA-256 of every node the hook sees (forward and
 * backward, in order), byte for byte.  Cases: the tiny preset (one 256-row tile: every rank but the first sends
 * its rows to the tile's owner), a batch of 12 (two tiles, the second starting inside a slice), padding rows with
 * an attention mask, a second configuration of odd sizes (5 heads: 3 + 2 over two ranks, 2 + 2 + 1 over three),
 * explicit uneven slices (one row; a slice ending one row before a tile boundary), and weight gradients folded in
 * chunks of a few rows; per-block recomputation (H3S_RECOMPUTE_BLOCKS) on the parallel model against one process
 * without it, on the odd configuration at every (sp, tp) and on a padded, masked batch of 12.  On the odd configuration
 * the dual trajectory's and the replay's JSON reports are compared too (every CPU model of the process parallel,
 * h3s_set_parallel), and BF16 parameter gradients (h3s_model_set_grad_dtype) on the parallel model are the
 * one-process F32 ones rounded.  A build without MPI prints SKIP. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "h3s_dist.h"
#include "h3s_sample.h"
#include "model_util.h"

static void run_logged(h3s_model *m, const h3s_inputs *in, run *r, node_log *log) {
    memset(r, 0, sizeof *r);
    h3s_tape *tape = NULL;
    CHECK_OK(h3s_model_forward(m, in, log_node, log, &tape, &r->sample, &r->audio));
    if (!tape) return;
    h3s_tensor ds, da;
    CHECK_OK(h3s_cotangent_random(r->sample.shape[0], r->sample.shape[1], r->sample.shape[2], r->audio.shape[1],
                                  r->audio.shape[2], 99, &ds, &da));
    CHECK_OK(h3s_model_backward(m, tape, &ds, &da, log_node, log, &r->grads));
    h3s_tensor_free(&ds);
    h3s_tensor_free(&da);
    h3s_tape_free(tape);
}

/* Whether the parallel run rp matches the run ra of one process: byte for byte, or, with BF16 parameter gradients
 * (h3s_model_set_grad_dtype on the parallel model), each BF16 gradient the one-process F32 one rounded once and
 * everything else byte for byte (grads_bf16_of; at least one gradient in BF16). */
static int matches_one_process(const run *ra, const run *rp, int grad_bf16) {
    int64_t nbf = 0;
    return grad_bf16 ? grads_bf16_of(ra, rp, &nbf) && nbf > 0 : runs_equal(ra, rp);
}

/* One case on this rank: alone, then as a slice of the world; everything compared. */
static void compare_case_mode(h3s_comm *comm, int sp, int tp, const char *label, const h3s_config *c, int64_t batch,
                              int64_t pad_to, int with_mask, const int64_t *sizes, h3s_recompute recompute,
                              int grad_bf16) {
    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_create(c, 17, &w));
    if (!w) return;
    request q;
    make_request(c, batch, pad_to, with_mask, &q);
    h3s_model *alone = NULL, *par = NULL;
    CHECK_OK(h3s_model_create(w, H3S_BACKEND_CPU, &alone));
    CHECK_OK(h3s_model_create(w, H3S_BACKEND_CPU, &par));
    CHECK_OK(h3s_model_set_parallel(par, comm, sp, tp));
    CHECK_OK(h3s_model_set_recompute(par, recompute));
    if (grad_bf16) CHECK_OK(h3s_model_set_grad_dtype(par, H3S_BF16));
    if (sizes) CHECK_OK(h3s_model_set_sp_slices(par, sizes, sp));
    run ra, rp;
    node_log la = {0}, lp = {0};
    run_logged(alone, &q.in, &ra, &la);
    run_logged(par, &q.in, &rp, &lp);
    CHECK(matches_one_process(&ra, &rp, grad_bf16),
          "[%s, sp %d tp %d, rank %d] outputs or gradients differ from one process", label, sp, tp, comm->rank);
    CHECK(la.n == lp.n && la.n > 0, "[%s] %lld nodes alone, %lld in parallel", label, (long long)la.n, (long long)lp.n);
    if (!grad_bf16) { /* with BF16 gradients the param.* nodes differ in dtype by design; the rest is checked above */
        int64_t first = node_log_first_diff(&la, &lp);
        CHECK(first < 0, "[%s, sp %d tp %d, rank %d] first differing node: %s (parallel: %s)", label, sp, tp,
              comm->rank, first >= 0 ? la.names[first] : "", first >= 0 ? lp.names[first] : "");
    }
    /* the comparison can fail: one flipped bit of one parameter gradient is seen */
    if (rp.grads.count > 0 && rp.grads.params[rp.grads.count - 1].data) {
        ((unsigned char *)rp.grads.params[rp.grads.count - 1].data)[0] ^= 1;
        CHECK(!matches_one_process(&ra, &rp, grad_bf16), "[%s] a flipped gradient bit went unseen", label);
    }
    run_free(&ra);
    run_free(&rp);
    node_log_free(&la);
    node_log_free(&lp);
    h3s_model_free(alone);
    h3s_model_free(par);
    request_free(&q);
    h3s_weights_free(w);
}

static void compare_case(h3s_comm *comm, int sp, int tp, const char *label, const h3s_config *c, int64_t batch,
                         int64_t pad_to, int with_mask, const int64_t *sizes) {
    compare_case_mode(comm, sp, tp, label, c, batch, pad_to, with_mask, sizes, H3S_RECOMPUTE_NONE, 0);
}

/* The dual trajectory and the replay report of a configuration, alone and with every CPU model of the process
 * parallel (h3s_set_parallel): the same JSON text. */
static void compare_reports(h3s_comm *comm, int sp, int tp, const char *label, const h3s_config *c) {
    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_create(c, 23, &w));
    if (!w) return;
    static const uint64_t seeds[1] = {11};
    h3s_trajectory_opts to;
    memset(&to, 0, sizeof to);
    to.seeds = seeds;
    to.nseeds = 1;
    to.steps = 2;
    to.batch = 3;
    to.backend = H3S_BACKEND_CPU;
    to.layout = (h3s_layout_opts){6, 2, 4, 6, 4, 1, 0, 0};
    to.with_grad = 1;
    char *alone = NULL, *par = NULL;
    h3s_trajectory_totals ta, tpar;
    CHECK_OK(h3s_trajectory(w, &to, &alone, &ta));
    CHECK_OK(h3s_set_parallel(comm, sp, tp));
    CHECK_OK(h3s_trajectory(w, &to, &par, &tpar));
    CHECK_OK(h3s_set_parallel(NULL, 1, 1));
    CHECK(alone && par && !strcmp(alone, par), "[%s, sp %d tp %d] trajectory reports differ", label, sp, tp);
    CHECK(ta.comparisons == 8 && ta.differing == 0 && tpar.differing == 0, "[%s] trajectory totals", label);
    h3s_free(alone);
    h3s_free(par);
    request q;
    make_request(c, 3, 0, 0, &q);
    h3s_replay_opts ro = {H3S_BACKEND_CPU, 1234, 0, NULL, NULL, NULL, 0};
    cJSON *ra = NULL, *rp = NULL;
    CHECK_OK(h3s_replay(w, &q.in, &ro, &ra));
    CHECK_OK(h3s_set_parallel(comm, sp, tp));
    CHECK_OK(h3s_replay(w, &q.in, &ro, &rp));
    CHECK_OK(h3s_set_parallel(NULL, 1, 1));
    char *ja = ra ? cJSON_PrintUnformatted(ra) : NULL, *jp = rp ? cJSON_PrintUnformatted(rp) : NULL;
    CHECK(ja && jp && !strcmp(ja, jp), "[%s, sp %d tp %d] replay reports differ", label, sp, tp);
    free(ja);
    free(jp);
    cJSON_Delete(ra);
    cJSON_Delete(rp);
    request_free(&q);
    h3s_weights_free(w);
}

static int worker(void) {
    h3s_comm *comm = NULL;
    CHECK_OK(h3s_comm_mpi_world(NULL, NULL, &comm));
    if (!comm) return h3t_finish("test_sp worker");
    h3s_set_num_threads(1);
    int n = comm->size;
    h3s_config tiny, odd;
    CHECK_OK(h3s_config_preset("tiny", -1, &tiny));
    odd = odd_config(&tiny);

    /* every (sp, tp) with sp x tp = the world; tiny's 3 heads cannot be cut 4 ways */
    for (int tp = 1; tp <= n; tp++) {
        if (n % tp) continue;
        int sp = n / tp;
        if (tp <= tiny.num_attention_heads) {
            compare_case(comm, sp, tp, "tiny, batch 2", &tiny, 2, 0, 0, NULL);
            compare_case(comm, sp, tp, "tiny, batch 12 (two tiles)", &tiny, 12, 0, 0, NULL);
            compare_case(comm, sp, tp, "tiny, padding rows and mask", &tiny, 3, 16, 1, NULL);
        } else {
            h3s_weights *w = NULL;
            h3s_model *m = NULL;
            CHECK_OK(h3s_weights_create(&tiny, 1, &w));
            CHECK_OK(h3s_model_create(w, H3S_BACKEND_CPU, &m));
            CHECK_FAILS(H3S_ERR_INVALID, h3s_model_set_parallel(m, comm, sp, tp));
            h3s_model_free(m);
            h3s_weights_free(w);
        }
        compare_case(comm, sp, tp, "odd config, batch 11", &odd, 11, 0, 0, NULL);
        /* per-block recomputation on the parallel model against one process without it */
        compare_case_mode(comm, sp, tp, "odd config, batch 11, recompute blocks", &odd, 11, 0, 0, NULL,
                          H3S_RECOMPUTE_BLOCKS, 0);
        compare_reports(comm, sp, tp, "odd config", &odd);
        compare_case_mode(comm, sp, tp, "odd config, batch 11, BF16 parameter gradients", &odd, 11, 0, 0, NULL,
                          H3S_RECOMPUTE_NONE, 1);
    }
    /* explicit uneven slices (S is 37 rows for this layout; batch 12 gives 444 rows) */
    request probe;
    make_request(&tiny, 12, 0, 0, &probe);
    int64_t M = 12 * probe.lay.S;
    request_free(&probe);
    int64_t sizes[4];
    /* the first slice ends one row before the tile boundary, the last ranks hold a single row each */
    int64_t rest = M - 255;
    for (int r = 0; r < n; r++)
        sizes[r] = r == 0 ? 255 : 1;
    sizes[n > 1 ? 1 : 0] += n > 1 ? rest - (n - 1) : rest;
    if (n > 1) compare_case(comm, n, 1, "tiny, batch 12, slices ending at 255 and single rows", &tiny, 12, 0, 0, sizes);
    if (n == 4) {
        int64_t two[2] = {255, M - 255};
        compare_case(comm, 2, 2, "tiny, batch 12, sp 2 x tp 2, a slice ending at 255", &tiny, 12, 0, 0, two);
    }

    /* weight gradients folded in chunks of one or a few rows: the same bits */
    CHECK_OK(h3s_model_set_sp_fold_budget(3000));
    compare_case(comm, n, 1, "tiny, batch 12, weight gradients folded in small chunks", &tiny, 12, 0, 0, NULL);
    if (n == 4) compare_case(comm, 2, 2, "odd config, sp 2 x tp 2, small fold chunks", &odd, 11, 0, 0, NULL);
    compare_case_mode(comm, n, 1, "tiny, batch 12, small fold chunks, recompute blocks", &tiny, 12, 16, 1, NULL,
                      H3S_RECOMPUTE_BLOCKS, 0);
    CHECK_OK(h3s_model_set_sp_fold_budget((int64_t)256 << 20));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_set_sp_fold_budget(0));

    /* refusals */
    h3s_weights *w = NULL;
    CHECK_OK(h3s_weights_create(&tiny, 3, &w));
    h3s_model *m = NULL, *g = NULL;
    CHECK_OK(h3s_model_create(w, H3S_BACKEND_CPU, &m));
    CHECK_OK(h3s_model_create(w, H3S_BACKEND_GOLDEN, &g));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_set_parallel(m, comm, n + 1, 1));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_set_parallel(m, comm, 0, n));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_model_set_parallel(m, comm, n, 2));
    if (n > 1) CHECK_FAILS(H3S_ERR_UNSUPPORTED, h3s_model_set_parallel(g, comm, n, 1));
    if (n > 1) {
        /* slice sizes that do not add up: the pass fails on every rank, nothing is returned */
        request q;
        make_request(&tiny, 2, 0, 0, &q);
        CHECK_OK(h3s_model_set_parallel(m, comm, n, 1));
        int64_t bad[4] = {1, 1, 1, 1};
        CHECK_OK(h3s_model_set_sp_slices(m, bad, n));
        h3s_tensor s = {0}, a = {0};
        CHECK_FAILS(H3S_ERR_SHAPE, h3s_model_forward(m, &q.in, NULL, NULL, NULL, &s, &a));
        CHECK(s.data == NULL && a.data == NULL, "a failed parallel forward returned outputs");
        CHECK_OK(h3s_model_set_sp_slices(m, bad, n - 1));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_forward(m, &q.in, NULL, NULL, NULL, &s, &a));
        CHECK_OK(h3s_model_set_sp_slices(m, NULL, 0));

        /* a tape from before a change of the parallel set-up is refused (its plan pointed into the communicators
         * the change freed: a use after free), even when the change sets the same cut again */
        h3s_tape *tape = NULL;
        CHECK_OK(h3s_model_forward(m, &q.in, NULL, NULL, &tape, &s, &a));
        h3s_tensor ds, da;
        CHECK_OK(h3s_cotangent_random(s.shape[0], s.shape[1], s.shape[2], a.shape[1], a.shape[2], 99, &ds, &da));
        CHECK_OK(h3s_model_set_parallel(m, comm, n, 1));
        h3s_grads gr;
        memset(&gr, 0, sizeof gr);
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_backward(m, tape, &ds, &da, NULL, NULL, &gr));
        CHECK(strstr(h3s_last_error(), "parallel setup changed"), "stale tape: %s", h3s_last_error());
        CHECK_OK(h3s_model_set_parallel(m, NULL, 1, 1));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_model_backward(m, tape, &ds, &da, NULL, NULL, &gr));
        h3s_tape_free(tape);
        h3s_tensor_free(&ds);
        h3s_tensor_free(&da);
        h3s_tensor_free(&s);
        h3s_tensor_free(&a);
        request_free(&q);
    }

    /* the cut's limits, checked before a pass (h3s_parallel_check) */
    CHECK_OK(h3s_parallel_check(&tiny, n, 1, n));
    CHECK_OK(h3s_parallel_check(&tiny, n, 1, 0));
    CHECK_FAILS(H3S_ERR_SHAPE, h3s_parallel_check(&tiny, n + 1, 1, n));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_parallel_check(&tiny, 1, (int)tiny.num_attention_heads + 1, 100));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_parallel_check(NULL, 1, 1, 1));
    CHECK_FAILS(H3S_ERR_INVALID, h3s_parallel_check(&tiny, 0, 1, 1));

    /* NULL buffers with bytes to move are refused before MPI sees them (a segfault inside MPI before) */
    {
        size_t counts[4] = {8, 8, 8, 8}, displs[4] = {0, 8, 16, 24};
        char buf[32];
        CHECK_FAILS(H3S_ERR_INVALID, h3s_comm_allgatherv(comm, NULL, buf, counts, displs));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_comm_allgatherv(comm, buf, NULL, counts, displs));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_comm_alltoallv(comm, NULL, counts, displs, buf, counts, displs));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_comm_alltoallv(comm, buf, counts, displs, NULL, counts, displs));
        CHECK_FAILS(H3S_ERR_INVALID, h3s_comm_bcast(comm, NULL, 8, 0));
    }
    h3s_model_free(m);
    h3s_model_free(g);
    h3s_weights_free(w);

    /* every rank's verdict, agreed: a failure anywhere fails the run everywhere */
    h3s_status mine = h3t_failures ? h3s_fail(H3S_ERR_MISMATCH, "%d checks failed", h3t_failures) : H3S_OK;
    int failed = -1;
    h3s_status all = h3s_comm_agree(comm, mine, &failed);
    CHECK(all == H3S_OK, "agreement: %s", h3s_last_error());
    char label[64];
    snprintf(label, sizeof label, "test_sp rank %d of %d", comm->rank, n);
    int rc = h3t_finish(label);
    h3s_comm_free(comm);
    return rc;
}

int main(int argc, char **argv) {
    if (getenv("OMPI_COMM_WORLD_SIZE")) return worker();
    if (!h3s_comm_mpi_built()) h3t_skip("this build has no MPI communicator (configure found no Open MPI)");
    const char *mpiexec = getenv("H3S_MPIEXEC");
    if (!mpiexec || !*mpiexec) h3t_skip("H3S_MPIEXEC is not set (ctest sets it to the launcher configure found)");
    int rc = 0;
    for (int n = 2; n <= 4; n++) {
        char cmd[4096];
        /* root in a container is allowed explicitly; one OpenMP thread per rank on a small machine.  Under the
         * sanitizers the ranks keep ASan's checks but not LeakSanitizer: Open MPI keeps allocations for the life of
         * the process in components it unloads at exit, which LeakSanitizer cannot attribute or suppress (every
         * other test checks h3strict's own leaks). */
        const char *asan = getenv("ASAN_OPTIONS");
        snprintf(cmd, sizeof cmd,
                 "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
                 "ASAN_OPTIONS='%s%sdetect_leaks=0' '%s' --oversubscribe -np %d '%s'",
                 asan ? asan : "", asan && *asan ? ":" : "", mpiexec, n, argv[0]);
        printf("test_sp: %s\n", cmd);
        fflush(stdout);
        int st = system(cmd);
        CHECK(st == 0, "%d ranks: exit status %d", n, st);
        rc |= st != 0;
    }
    (void)rc;
    return h3t_finish("test_sp");
}
